// The coordinator's evaluator supervision hooks (docs/reliability.md,
// "Evaluator loss"): a lost evaluator is reported at once (event, progress
// line, WARN line, status, metrics) and a replacement's registration closes the
// gap. Runs on the coordinator thread.
#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/coordinator.h"

namespace groupsgd::coordinator {

void Coordinator::evaluatorJoined(const WorkerRecord& w) {
  // A new evaluator under the name and host of an active one that has gone
  // quiet is its restart (a supervisor's): the old process is gone, so say so
  // now rather than at its heartbeat limit. (Two live evaluators need distinct
  // names.)
  const auto quiet = std::chrono::milliseconds(cfg_.heartbeat_ms);
  for (const auto& [id, other] : registry_.all()) {
    if (id == w.id || other.role != WorkerRole::kEvaluator || other.state != WorkerState::kActive ||
        other.name != w.name || other.host != w.host || w.name.empty() ||
        Clock::now() - other.last_seen < quiet) {
      continue;
    }
    registry_.find(id)->state = WorkerState::kDead;
    evaluatorLost(other, "replaced by evaluator " + std::to_string(w.id) + " of the same name");
  }
  const bool replacing = evaluators_.unmeasuredSince().has_value();
  const Accuracy last = latestAccuracy();
  const std::string text =
      evaluators_.joined(w.id, w.name, run_log_.uptimeS(), {last.value, last.version});
  if (replacing) {
    event("evaluator_back", text);
  } else {
    GSGD_INFO(text);
  }
}

void Coordinator::evaluatorLost(const WorkerRecord& w, const std::string& why) {
  const Accuracy last = latestAccuracy();
  const std::string text =
      evaluators_.lost(w.id, w.name, why, run_log_.uptimeS(), {last.value, last.version});
  if (text.empty()) return;
  GSGD_WARN(text);
  event("evaluator_lost", text);
}

}  // namespace groupsgd::coordinator
