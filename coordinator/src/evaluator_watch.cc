#include "groupsgd/coordinator/evaluator_watch.h"

#include <cstdio>

namespace groupsgd::coordinator {
namespace {

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

std::string describe(const EvaluatorWatch::Measured& m) {
  if (m.accuracy < 0) return "nothing measured yet";
  char buf[96];
  std::snprintf(buf, sizeof buf, "last accuracy %.4f at central version %llu", m.accuracy,
                static_cast<unsigned long long>(m.version));
  return buf;
}

std::string who(std::uint64_t id, const std::string& name) {
  return "evaluator " + std::to_string(id) + (name.empty() ? "" : " (" + name + ")");
}

}  // namespace

std::string EvaluatorWatch::joined(std::uint64_t id, const std::string& name, double now_s,
                                   Measured last) {
  active_.insert(id);
  ++registered_;
  std::string text = who(id, name) + " registered";
  if (gap_started_s_) {
    // A replacement: measurement resumes on the newest central model, which is
    // at least as new as the one measured last, so nothing measured is lost,
    // only time.
    const double gap = now_s - *gap_started_s_;
    unmeasured_total_s_ += gap;
    ++replacements_;
    text += ": replaces the lost evaluator, accuracy measured again after " + seconds(gap) +
            " without (resumes after " + describe(last) + ")";
    gaps_.back()["resumed_t_s"] = now_s;
    gaps_.back()["unmeasured_s"] = gap;
    gaps_.back()["replaced_by"] = id;
    gap_started_s_.reset();
  }
  exportMetrics();
  return text;
}

std::string EvaluatorWatch::lost(std::uint64_t id, const std::string& name, const std::string& why,
                                 double now_s, Measured last) {
  if (active_.erase(id) == 0) return {};
  ++losses_;
  std::string text = who(id, name) + " " + why;
  if (active_.empty()) {
    gap_started_s_ = now_s;
    text += ": accuracy no longer measured (" + describe(last) +
            "); the target cannot be reached until an evaluator registers again";
    gaps_.push_back({{"lost_t_s", now_s},
                     {"evaluator", id},
                     {"why", why},
                     {"last_accuracy", last.accuracy < 0 ? nlohmann::ordered_json()
                                                         : nlohmann::ordered_json(last.accuracy)},
                     {"last_version", last.version},
                     {"resumed_t_s", nullptr},
                     {"unmeasured_s", nullptr},
                     {"replaced_by", nullptr}});
  } else {
    text += "; " + std::to_string(active_.size()) + " evaluator(s) still measure";
  }
  last_loss_ = text;
  exportMetrics();
  return text;
}

std::string EvaluatorWatch::progressNote(double now_s) const {
  if (!gap_started_s_) return {};
  return " (not measured for " + seconds(now_s - *gap_started_s_) + ": evaluator lost)";
}

nlohmann::ordered_json EvaluatorWatch::statusJson(double now_s) const {
  const char* state = measuring() ? "measuring" : gap_started_s_ ? "lost" : "no evaluator yet";
  return {{"state", state},
          {"accuracy_measured", measuring()},
          {"evaluators_active", active_.size()},
          {"evaluators_lost", losses_},
          {"replacements", replacements_},
          {"unmeasured_for_s",
           gap_started_s_ ? nlohmann::ordered_json(now_s - *gap_started_s_) : nullptr},
          {"last_loss",
           last_loss_.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(last_loss_)}};
}

nlohmann::ordered_json EvaluatorWatch::summaryJson(double now_s) const {
  nlohmann::ordered_json j = statusJson(now_s);
  j.erase("last_loss");
  j["evaluators_registered"] = registered_;
  j["unmeasured_total_s"] = unmeasured_total_s_ + (gap_started_s_ ? now_s - *gap_started_s_ : 0.0);
  j["gaps"] = gaps_;
  return j;
}

void EvaluatorWatch::exportMetrics() {
  if (metrics_ == nullptr) return;
  metrics_->gauge("evaluators_active", "evaluators registered and alive")
      .set(static_cast<double>(active_.size()));
  metrics_->gauge("accuracy_measured", "1 while an evaluator measures test accuracy, else 0")
      .set(measuring() ? 1 : 0);
  // Counted here, when it happens, so a scrape right after a loss sees it.
  auto& c = metrics_->counter("evaluator_losses_total", "evaluators lost while training");
  if (c.value() < static_cast<double>(losses_)) c.inc(static_cast<double>(losses_) - c.value());
}

}  // namespace groupsgd::coordinator
