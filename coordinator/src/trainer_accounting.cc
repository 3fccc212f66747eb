#include "groupsgd/coordinator/trainer_accounting.h"

#include <algorithm>

namespace groupsgd::coordinator {

ReconciledTrainer reconcileTrainer(const TrainerCounts& c) {
  ReconciledTrainer r;
  if (c.in_failed_group) {
    // Without a final report its last heartbeat is all there is; but a member moved to a
    // live group and then declared dead may have pushes counted there after that
    // heartbeat, and what a live group counted was trained.
    r.credited = std::max(c.reported + (c.final_report ? c.unconfirmed : 0), c.acknowledged);
    return r;
  }
  r.credited = c.acknowledged;
  if (!c.final_report) return r;  // dead or quarantined: the groups' count alone
  r.consistent = c.reported <= c.acknowledged && c.acknowledged <= c.reported + c.unconfirmed;
  if (c.acknowledged > c.reported) r.counted_unanswered = c.acknowledged - c.reported;
  return r;
}

}  // namespace groupsgd::coordinator
