// The failures of one run's groups, as the summary reports them: each failed group with
// why, when and where its members went; the trainers whose counts died with a failed
// group (credited with their own last report instead); the replayed pushes each group PS
// refused (its latest poll or flush); and the spare group PSes nodes offer for re-creating
// a failed group.
// Thread rule: plain data of the coordinator thread (no locks).
#pragma once

#include <cstdint>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "groupsgd/coordinator/node_spares.h"

namespace groupsgd::coordinator {

class FailureLedger {
 public:
  // A failed group: {"group", "why", "t_s", "reassigned", ...} as the summary lists it.
  void record(nlohmann::json failure) { failures_.push_back(std::move(failure)); }
  bool any() const { return !failures_.empty(); }
  // The node_failures array; the loss is measured over all failed groups together.
  nlohmann::json json(std::uint64_t lost, std::uint64_t bound) const;

  void lostWith(std::uint64_t trainer) { failed_group_members_.insert(trainer); }
  const std::set<std::uint64_t>& failedGroupMembers() const { return failed_group_members_; }

  // A group PS's count of refused replays (each report replaces the last).
  void replays(std::uint32_t group, std::uint64_t count) { group_replays_[group] = count; }
  std::uint64_t replaysTotal() const;

  NodeSpares& spares() { return spares_; }

 private:
  nlohmann::json failures_ = nlohmann::json::array();
  std::set<std::uint64_t> failed_group_members_;
  std::map<std::uint32_t, std::uint64_t> group_replays_;
  NodeSpares spares_;  // group PSes nodes offered beyond the slots in use (re-creation)
};

}  // namespace groupsgd::coordinator
