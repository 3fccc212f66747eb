// What this head incarnation knows of the central model's history: where it resumed from
// (head_start.h), the newest central version it has seen (written to the head's state
// file at once, so a successor can say what was lost), checkpoint writes that failed, and
// how long the trainers took to come back after a restart.
// Thread rule: plain data of the coordinator thread; noteVersion() writes a small file.
#pragma once

#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "groupsgd/coordinator/head_start.h"

namespace groupsgd::coordinator {

class HeadRecord {
 public:
  const HeadStart& start() const { return start_; }
  void setStart(HeadStart start) { start_ = std::move(start); }

  // A central version seen (stats, a checkpoint): kept, and recorded in the state file
  // when newer than the last one recorded.
  void noteVersion(std::uint64_t version);
  std::uint64_t versionSeen() const { return version_seen_; }

  // The central PS's count of failed checkpoint writes; returns how many are new.
  std::uint64_t newCheckpointFailures(std::uint64_t failures);

  // A restarted head: the time it took until every configured trainer was back.
  void noteTrainersBack(std::size_t active, std::size_t expected, double uptime_s);

  // The summary's head_restart (null for a fresh first start).
  nlohmann::json restartJson(std::uint64_t checkpoint_every_versions,
                             double checkpoint_interval_s) const;

 private:
  HeadStart start_;
  std::uint64_t version_seen_ = 0;
  std::uint64_t persisted_version_ = 0;
  std::uint64_t checkpoint_failures_seen_ = 0;
  std::optional<double> reregistered_after_s_;
};

}  // namespace groupsgd::coordinator
