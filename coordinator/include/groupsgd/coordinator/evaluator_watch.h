// Supervision of the evaluators (docs/reliability.md, "Evaluator loss"): the
// coordinator tells this watch when an evaluator registers, is declared dead or
// leaves while training goes on; the watch says whether accuracy is being
// measured, since when it is not, and what a replacement resumes from. The
// coordinator turns its answers into events, the progress line, `status`, the
// summary and metrics. Thread rule: plain data, used on the coordinator thread
// only.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "groupsgd/ops/metrics.h"

namespace groupsgd::coordinator {

// Names this room takes from the adaptive and ops libraries.
using ops::MetricsRegistry;

class EvaluatorWatch {
 public:
  // The last measurement before a loss: what a replacement resumes from.
  struct Measured {
    double accuracy = -1;       // -1: nothing measured yet
    std::uint64_t version = 0;  // central version it was measured on
  };

  // Counters and gauges go here as well as into the summary (optional,
  // borrowed).
  void attachMetrics(MetricsRegistry* metrics) { metrics_ = metrics; }

  // An evaluator registered at now_s (seconds since the daemon started).
  // Returns the event text; a replacement's text names the gap it closes and
  // where measurement resumes.
  std::string joined(std::uint64_t id, const std::string& name, double now_s, Measured last);
  // An active evaluator was declared dead or left while training goes on (why
  // says which). Returns the event text, which says whether accuracy is still
  // measured.
  std::string lost(std::uint64_t id, const std::string& name, const std::string& why, double now_s,
                   Measured last);

  // At least one evaluator is active.
  bool measuring() const { return !active_.empty(); }
  // Since when nothing measures (after a loss; nullopt while measuring or
  // before the first).
  std::optional<double> unmeasuredSince() const { return gap_started_s_; }
  // For the progress line: "" while measuring (or before any evaluator came),
  // else
  // "(not measured for 12.3 s: evaluator lost)".
  std::string progressNote(double now_s) const;
  // `status`'s "evaluation" object and the summary's.
  nlohmann::ordered_json statusJson(double now_s) const;
  nlohmann::ordered_json summaryJson(double now_s) const;
  std::uint64_t losses() const { return losses_; }
  std::uint64_t replacements() const { return replacements_; }

 private:
  void exportMetrics();

  MetricsRegistry* metrics_ = nullptr;
  std::set<std::uint64_t> active_;
  std::uint64_t registered_ = 0;
  std::uint64_t losses_ = 0;
  std::uint64_t replacements_ = 0;
  std::optional<double> gap_started_s_;  // open gap: no evaluator since
  double unmeasured_total_s_ = 0;        // closed gaps
  std::string last_loss_;                // text of the last loss
  nlohmann::ordered_json gaps_ = nlohmann::ordered_json::array();
};

}  // namespace groupsgd::coordinator
