// The coordinator's view of every process that registered: role, group, liveness and the
// statistics reported in heartbeats. Plain data; the coordinator thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace groupsgd::adaptive {

enum class WorkerRole { kTrainer, kEvaluator, kTool, kNode };
// kQuarantined: refused for repeated bad updates until an operator clears it.
enum class WorkerState { kActive, kLeft, kDead, kQuarantined };
const char* workerRoleName(WorkerRole r);
const char* workerStateName(WorkerState s);

struct WorkerRecord {
  std::uint64_t id = 0;
  WorkerRole role = WorkerRole::kTrainer;
  WorkerState state = WorkerState::kActive;
  std::string host;
  std::uint32_t pid = 0;
  std::string name;
  std::string public_key;  // CURVE key it registered with; binds its id ("" = no CURVE)
  std::uint32_t group = 0;
  std::uint32_t batch_size = 0;
  std::uint32_t shard = 0;
  std::uint64_t epoch = 0;
  std::optional<std::uint32_t> moving_from;  // regrouped: still told so by its old group
  std::uint64_t moving_epoch = 0;            // the epoch it has in that old group
  bool draining = false;                     // its next gradient is its last
  std::chrono::steady_clock::time_point last_seen;
  // From heartbeats / Leave.
  std::uint64_t samples_trained = 0;
  std::uint64_t samples_unconfirmed = 0;  // Leave: pushes that got no positive answer
  // A trainer declared dead that closed its registration later (its Leave before
  // registering again): samples_trained is its final count, used if its group failed.
  bool reported_after_death = false;
  std::uint64_t steps = 0;
  float last_loss = 0;
  float compute_ms = 0;
  float comm_ms = 0;
  float wait_ms = 0;
  // Sums over every step reported so far (where its time went; the summary's worker_stats).
  double total_compute_ms = 0, total_comm_ms = 0, total_wait_ms = 0;
  float test_accuracy = -1;
  std::uint64_t evaluated_version = 0;
  float test_loss = -1;  // evaluators that report a validation loss (-1 = none)
};

class Registry {
 public:
  WorkerRecord& add(WorkerRecord r);
  WorkerRecord* find(std::uint64_t id);
  const std::map<std::uint64_t, WorkerRecord>& all() const { return workers_; }
  std::map<std::uint64_t, WorkerRecord>& allMutable() { return workers_; }
  // Active trainers of one group, in id order.
  std::vector<const WorkerRecord*> groupMembers(std::uint32_t group) const;
  std::size_t activeTrainers() const;
  std::size_t activeOfRole(WorkerRole role) const;
  std::uint64_t samplesTrained() const;  // over every trainer, left and dead included

 private:
  std::map<std::uint64_t, WorkerRecord> workers_;
};

// Chooses the group of a new trainer. A replaceable policy: the adaptive coordinator
// (regrouping by speed) plugs in here later.
class AssignmentPolicy {
 public:
  virtual ~AssignmentPolicy() = default;
  virtual std::uint32_t groupFor(const Registry& registry, std::uint32_t group_count) = 0;
};

// Static policy: the group with the fewest active trainers (lowest id on ties), which
// spreads workers evenly in registration order.
class LeastLoadedPolicy final : public AssignmentPolicy {
 public:
  std::uint32_t groupFor(const Registry& registry, std::uint32_t group_count) override;
};

}  // namespace groupsgd::adaptive
