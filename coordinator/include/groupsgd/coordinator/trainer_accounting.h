// What one trainer registration trained, reconciled between its own report and what the
// group PSes counted from it (docs/reliability.md, "Accounting"). A push whose answer did
// not come back in time (--timeout-ms) may still have been counted by its group: the
// worker then reports fewer samples than the server applied. The group PSes' per-worker
// count is the authority wherever it is known; the worker's report bounds it. Pure; any
// thread.
#pragma once

#include <cstdint>

namespace groupsgd::coordinator {

struct TrainerCounts {
  std::uint64_t reported = 0;      // samples_trained from its Leave (or last heartbeat)
  std::uint64_t unconfirmed = 0;   // samples of its pushes that got no positive answer
  std::uint64_t acknowledged = 0;  // what the live group PSes counted from it (flush)
  bool final_report = false;       // it left normally: `reported` is its final count
  bool in_failed_group = false;    // it was in a group whose PS died (its count is gone)
};

struct ReconciledTrainer {
  std::uint64_t credited = 0;            // its samples_trained in the run summary
  std::uint64_t counted_unanswered = 0;  // counted by a group, answer never seen by it
  bool consistent = true;  // the report and the groups' count agree within `unconfirmed`
};

// Trainers that were never in a failed group are credited with what their groups
// counted; one that left normally is checked: reported <= acknowledged <= reported +
// unconfirmed. A member of a failed group is credited with its report plus its
// unconfirmed pushes (those may lie in the failed group, which cannot be asked), or with
// what the live groups counted from it when that is more: the
// summary counts what no live group holds of them as lost, within a bound.
ReconciledTrainer reconcileTrainer(const TrainerCounts& c);

}  // namespace groupsgd::coordinator
