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
  return s;
}

}  // namespace groupsgd::centralps
