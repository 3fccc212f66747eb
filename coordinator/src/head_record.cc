#include "groupsgd/coordinator/head_record.h"

#include <algorithm>

#include "groupsgd/common/atomic_file.h"

namespace groupsgd::coordinator {

void HeadRecord::noteVersion(std::uint64_t version) {
  version_seen_ = std::max(version_seen_, version);
  // At once: a head killed now has recorded the newest version it saw.
  if (start_.state_file.empty() || version_seen_ <= persisted_version_) return;
  const nlohmann::json j = {{"incarnation", start_.incarnation},
                            {"central_version_seen", version_seen_}};
  if (writeFileAtomically(start_.state_file, j.dump() + "\n").isOk()) {
    persisted_version_ = version_seen_;
  }
}

std::uint64_t HeadRecord::newCheckpointFailures(std::uint64_t failures) {
  if (failures <= checkpoint_failures_seen_) return 0;
  const std::uint64_t newly = failures - checkpoint_failures_seen_;
  checkpoint_failures_seen_ = failures;
  return newly;
}

void HeadRecord::noteTrainersBack(std::size_t active, std::size_t expected, double uptime_s) {
  if (reregistered_after_s_ || start_.resumed_from.empty()) return;
  if (active >= expected) reregistered_after_s_ = uptime_s;
}

nlohmann::json HeadRecord::restartJson(std::uint64_t checkpoint_every_versions,
                                       double checkpoint_interval_s) const {
  if (start_.resumed_from.empty() && !start_.previous_version_seen) return nullptr;
  // The previous head recorded its version once a second, so the versions lost are at
  // least recorded - resumed; the checkpoint policy bounds them from above.
  nlohmann::json at_least;
  if (start_.previous_version_seen) {
    at_least = *start_.previous_version_seen > start_.resumed_version
                   ? *start_.previous_version_seen - start_.resumed_version
                   : 0;
  }
  nlohmann::json lost_bound =
      checkpoint_every_versions > 0 ? nlohmann::json(checkpoint_every_versions) : nlohmann::json();
  if (start_.took_over_from && start_.standby_sync) lost_bound = 0;  // every ack is here
  return {{"incarnation", start_.incarnation},
          {"took_over_from_incarnation",
           start_.took_over_from ? nlohmann::json(*start_.took_over_from) : nlohmann::json()},
          {"resumed_from", start_.resumed_from},
          {"resumed_version", start_.resumed_version},
          {"skipped_checkpoints", start_.skipped_checkpoints},
          {"previous_version_seen", start_.previous_version_seen
                                        ? nlohmann::json(*start_.previous_version_seen)
                                        : nlohmann::json()},
          {"versions_lost_at_least", at_least},
          {"versions_lost_bound", lost_bound},
          {"checkpoint_every_versions", checkpoint_every_versions},
          {"checkpoint_interval_s", checkpoint_interval_s},
          {"time_to_reregister_s",
           reregistered_after_s_ ? nlohmann::json(*reregistered_after_s_) : nlohmann::json()}};
}

}  // namespace groupsgd::coordinator
