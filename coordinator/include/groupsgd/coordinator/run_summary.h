// The run summary's accounting (docs/architecture.md, "Accounting"), built as a pure
// function of the worker registry and the counters the servers reported at the end: what
// the trainers trained against what the central PS applied and the groups dropped, each
// trainer credited with what the live groups acknowledged from it (its own report checked
// against that count: trainer_accounting.h), the progress lost with failed groups, and the
// per-worker, per-group and central tables of the summary.
// Thread rule: plain values and pure functions; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "groupsgd/adaptive/registry.h"
#include "groupsgd/centralps/central_stats.h"
#include "groupsgd/groupps/group_stats.h"

namespace groupsgd::coordinator {

// Names this room takes from the adaptive and ops libraries.
using adaptive::Registry;

// One group PS's answer to the final flush, by the slot it serves.
struct GroupFlush {
  std::uint32_t group = 0;
  groupps::GroupStats stats;
};

// Everything the summary's accounting is built from, besides the registry.
struct FinalStats {
  std::vector<GroupFlush> groups;                  // the groups that answered the flush
  std::optional<centralps::CentralStats> central;  // nullopt: the central PS did not answer
  bool groups_failed = false;                      // some group PS was lost with its node
  std::set<std::uint64_t> failed_group_members;    // trainers that were in a failed group
  std::uint64_t coordinator_bad_messages = 0;
};

struct RunSummary {
  std::uint64_t samples_trained = 0;  // dead trainers credited (below)
  std::uint64_t samples_received = 0;
  std::uint64_t samples_applied = 0;
  std::uint64_t samples_dropped = 0;  // failed groups' lost progress included
  std::uint64_t samples_unaccounted = 0;
  std::uint64_t samples_lost_in_failed_groups = 0;
  std::uint64_t lost_bound = 0;  // what the failed groups' members trained
  std::uint64_t samples_trained_by_dead_workers = 0;
  std::uint64_t late_gradients = 0;
  std::uint64_t steps_cut = 0;
  std::uint64_t bad_messages = 0;
  std::uint64_t central_version = 0;
  // Samples the groups counted whose push answer the trainer never saw (--timeout-ms).
  std::uint64_t samples_counted_unanswered = 0;
  bool worker_reports_ok = true;  // every final report within its unanswered pushes
  bool accounting_ok = false;
  // What each trainer counts in the summary (reconcileTrainer): what the live groups
  // acknowledged from it, or for a member of a failed group its report.
  std::map<std::uint64_t, std::uint64_t> credited;
  std::vector<std::string> inconsistent_reports;  // one line per report that disagrees
  nlohmann::json worker_stats = nlohmann::json::array();
  nlohmann::json group_stats = nlohmann::json::array();
  nlohmann::json central = nlohmann::json();  // null when the central PS did not answer

  // The summary's fields above, by their docs/config.md names.
  nlohmann::json toJson() const;
};

RunSummary summarizeRun(const Registry& registry, const FinalStats& stats);

}  // namespace groupsgd::coordinator
