#include "groupsgd/daemon/trainer_accounting.h"

namespace groupsgd::daemon {

ReconciledTrainer reconcileTrainer(const TrainerCounts& c) {
  ReconciledTrainer r;
  if (c.in_failed_group) {
    // Without a final report its last heartbeat is all there is (as before).
    r.credited = c.reported + (c.final_report ? c.unconfirmed : 0);
    return r;
  }
  r.credited = c.acknowledged;
  if (!c.final_report) return r;  // dead or quarantined: the groups' count alone
  r.consistent = c.reported <= c.acknowledged && c.acknowledged <= c.reported + c.unconfirmed;
  if (c.acknowledged > c.reported) r.counted_unanswered = c.acknowledged - c.reported;
  return r;
}

}  // namespace groupsgd::daemon
