#include "groupsgd/coordinator/best_model.h"

namespace groupsgd::coordinator {
namespace {

nlohmann::json orNull(double v) { return v < 0 ? nlohmann::json() : nlohmann::json(v); }

}  // namespace

bool BestModel::offer(const Evaluation& e, bool by_loss) {
  if (!e.any()) return false;
  if (best_ && e.version == best_->version) return false;  // the same report again
  // Judged by loss when asked to, or when there is no accuracy to judge by.
  const bool loss_rule = (by_loss && e.loss >= 0) || e.accuracy < 0;
  bool better = !best_.has_value();
  if (best_ && loss_rule) {
    better = e.loss >= 0 && (best_->loss < 0 || e.loss < best_->loss);
  } else if (best_) {
    better = e.accuracy > best_->accuracy;
  }
  if (better) best_ = e;
  return better;
}

void BestModel::written(std::uint64_t version, const std::string& path) {
  if (version < written_version_) return;  // an older write finishing late
  written_version_ = version;
  written_path_ = path;
}

void BestModel::notWritten(std::uint64_t version, const std::string& why) {
  failed_version_ = version;
  failed_why_ = why;
}

std::string BestModel::file() const {
  return best_ && written_version_ == best_->version ? written_path_ : std::string();
}

nlohmann::json BestModel::summaryJson() const {
  const std::string path = file();
  nlohmann::json error;
  if (best_ && path.empty() && failed_version_ == best_->version) error = failed_why_;
  return {
      {"best_test_acc", best_ ? orNull(best_->accuracy) : nlohmann::json()},
      {"best_test_loss", best_ ? orNull(best_->loss) : nlohmann::json()},
      {"best_version", best_ ? nlohmann::json(best_->version) : nlohmann::json()},
      {"best_model_file", path.empty() ? nlohmann::json() : nlohmann::json(path)},
      {"best_model_error", error},
  };
}

}  // namespace groupsgd::coordinator
