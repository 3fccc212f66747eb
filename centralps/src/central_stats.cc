#include "groupsgd/centralps/central_stats.h"

namespace groupsgd::centralps {

void toProto(const CentralStats& s, proto::CentralStats::Builder out) {
  out.setVersion(s.version);
  out.setUpdatesApplied(s.updates_applied);
  out.setUpdatesRefused(s.updates_refused);
  out.setSamplesApplied(s.samples_applied);
  out.setSamplesRefused(s.samples_refused);
  out.setBadMessages(s.bad_messages);
  out.setMaxStaleness(s.max_staleness);
  out.setMeanStaleness(s.mean_staleness);
  out.setCheckpointVersion(s.checkpoint_version);
  out.setCheckpointFailures(s.checkpoint_failures);
  out.setStandbyConfigured(s.standby_configured);
  out.setStandbyAttached(s.standby_attached);
  out.setStandbyAckedVersion(s.standby_acked_version);
  out.setStandbyLosses(s.standby_losses);
  out.setStandbyMaxLag(s.standby_max_lag);
  out.setStandbyAckWaitMs(s.standby_ack_wait_ms);
  out.setStandbyAlone(s.standby_alone);
  out.setUncommittedDeltas(s.uncommitted_deltas);
}

CentralStats fromProto(proto::CentralStats::Reader in) {
  CentralStats s;
  s.version = in.getVersion();
  s.updates_applied = in.getUpdatesApplied();
  s.updates_refused = in.getUpdatesRefused();
  s.samples_applied = in.getSamplesApplied();
  s.samples_refused = in.getSamplesRefused();
  s.bad_messages = in.getBadMessages();
  s.max_staleness = in.getMaxStaleness();
  s.mean_staleness = in.getMeanStaleness();
  s.checkpoint_version = in.getCheckpointVersion();
  s.checkpoint_failures = in.getCheckpointFailures();
  s.standby_configured = in.getStandbyConfigured();
  s.standby_attached = in.getStandbyAttached();
  s.standby_acked_version = in.getStandbyAckedVersion();
  s.standby_losses = in.getStandbyLosses();
  s.standby_max_lag = in.getStandbyMaxLag();
  s.standby_ack_wait_ms = in.getStandbyAckWaitMs();
  s.standby_alone = in.getStandbyAlone();
  s.uncommitted_deltas = in.getUncommittedDeltas();
  return s;
}

}  // namespace groupsgd::centralps
