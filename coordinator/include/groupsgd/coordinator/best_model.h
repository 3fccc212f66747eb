// The best-evaluated model of a run (keep_best, docs/pytorch.md): which evaluator report
// was the best so far, whether the central PS has written that version's file, and the
// best and final figures of the summary. Best is the highest accuracy, or the lowest
// validation loss when the run has a target loss (or the report has no accuracy); a tie
// keeps the earlier version. Thread rule: plain data of the coordinator thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace groupsgd::coordinator {

// One evaluator report: accuracy and loss of one central version (-1 = not measured).
struct Evaluation {
  double accuracy = -1;
  double loss = -1;
  std::uint64_t version = 0;
  bool any() const { return accuracy >= 0 || loss >= 0; }
};

class BestModel {
 public:
  // A report came in. True when it is a new best (its version's file should be written);
  // by_loss: judge by loss (the run has a target loss).
  bool offer(const Evaluation& e, bool by_loss);
  const std::optional<Evaluation>& best() const { return best_; }
  // The central PS answered a write of `version` to `path`: ok, or why not.
  void written(std::uint64_t version, const std::string& path);
  void notWritten(std::uint64_t version, const std::string& why);
  // The file holding the best version, "" when none does (not asked, failed, or a newer
  // best is not written yet).
  std::string file() const;
  // best_test_acc, best_test_loss, best_version, best_model_file (null when none), and
  // best_model_error (why the best version has no file; null when it has or none was asked).
  nlohmann::json summaryJson() const;

 private:
  std::optional<Evaluation> best_;
  std::uint64_t written_version_ = 0;
  std::string written_path_;
  std::uint64_t failed_version_ = 0;
  std::string failed_why_;
};

}  // namespace groupsgd::coordinator
