#include "groupsgd/adaptive/registry.h"

#include <array>
#include <limits>

#include "groupsgd/base/enum_names.h"

namespace groupsgd::adaptive {

constexpr std::array<base::EnumName<WorkerRole>, 4> kWorkerRoleNames{{
    {WorkerRole::kTrainer, "trainer"},
    {WorkerRole::kEvaluator, "evaluator"},
    {WorkerRole::kTool, "tool"},
    {WorkerRole::kNode, "node"},
}};

constexpr std::array<base::EnumName<WorkerState>, 4> kWorkerStateNames{{
    {WorkerState::kActive, "active"},
    {WorkerState::kLeft, "left"},
    {WorkerState::kDead, "dead"},
    {WorkerState::kQuarantined, "quarantined"},
}};

const char* workerRoleName(WorkerRole r) { return base::nameOf(kWorkerRoleNames, r); }

const char* workerStateName(WorkerState s) { return base::nameOf(kWorkerStateNames, s); }

WorkerRecord& Registry::add(WorkerRecord r) {
  const auto id = r.id;
  return workers_[id] = std::move(r);
}

WorkerRecord* Registry::find(std::uint64_t id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

std::vector<const WorkerRecord*> Registry::groupMembers(std::uint32_t group) const {
  std::vector<const WorkerRecord*> out;
  for (const auto& [id, w] : workers_) {
    if (w.role == WorkerRole::kTrainer && w.state == WorkerState::kActive && w.group == group) {
      out.push_back(&w);
    }
  }
  return out;
}

std::size_t Registry::activeOfRole(WorkerRole role) const {
  std::size_t n = 0;
  for (const auto& [id, w] : workers_) n += w.role == role && w.state == WorkerState::kActive;
  return n;
}

std::size_t Registry::activeTrainers() const { return activeOfRole(WorkerRole::kTrainer); }

std::uint64_t Registry::samplesTrained() const {
  std::uint64_t n = 0;
  for (const auto& [id, w] : workers_) {
    if (w.role == WorkerRole::kTrainer) n += w.samples_trained;
  }
  return n;
}

std::uint32_t LeastLoadedPolicy::groupFor(const Registry& registry, std::uint32_t group_count) {
  std::uint32_t best = 0;
  std::size_t best_n = std::numeric_limits<std::size_t>::max();
  for (std::uint32_t g = 0; g < group_count; ++g) {
    const std::size_t n = registry.groupMembers(g).size();
    if (n < best_n) {
      best = g;
      best_n = n;
    }
  }
  return best;
}

}  // namespace groupsgd::adaptive
