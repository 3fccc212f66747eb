#include <algorithm>
#include <chrono>
#include <string>

#include "groupsgd/common/log.h"
#include "job_host_impl.h"

namespace groupsgd::jobs {

using ojson = nlohmann::ordered_json;

std::uint32_t JobHost::localSlotsInUse() const {
  std::uint32_t n = 0;
  for (const auto& [name, h] : running_) n += h->local_slots;
  return n;
}

void JobHost::tendNodes() {
  // The coordinators' rule for their workers: a loaded node may be late, and a node
  // really dead is failed by each job's coordinator on its own.
  const auto limit = std::chrono::milliseconds(
      std::max<std::uint64_t>(static_cast<std::uint64_t>(cfg_.heartbeat_ms) * cfg_.heartbeat_misses,
                              cfg_.step_deadline_ms + 2ull * cfg_.heartbeat_ms));
  for (const auto& gone : pool_.expire(limit)) {
    GSGD_WARN(gone << " missed its heartbeats: dropped from the pool (the jobs' coordinators "
                      "fail the groups it served)");
  }
  if (pool_.free() == 0) return;
  for (const auto& [name, h] : running_) {
    if (h->done.load()) continue;
    const std::uint32_t wanted = h->slots - h->local_slots;
    const std::uint64_t id = h->cfg.job_id;
    const std::uint32_t have = pool_.placed(id);
    if (have >= wanted) continue;
    const std::uint32_t placed = pool_.place(id, wanted - have);
    if (placed > 0) {
      GSGD_INFO("job '" << name << "': " << placed << " group PS slot(s) placed on node daemons ("
                        << have + placed << " of " << wanted << ")");
    }
  }
}

ojson JobHost::groupSlotsJson() const {
  ojson nodes = ojson::array();
  for (const auto& [id, n] : pool_.nodes()) {
    ojson placed = ojson::object();
    for (const auto& [job, k] : n.placed) placed[std::to_string(job)] = k;
    nodes.push_back({{"id", id - NodePool::kFirstId + 1},
                     {"host", n.host},
                     {"slots", n.slots},
                     {"in_use", std::min(n.slots, n.used())},
                     {"jobs", placed}});
  }
  return {{"max", cfg_.max_group_slots},
          {"in_use", slotsInUse()},
          {"local_in_use", localSlotsInUse()},
          {"node_slots", pool_.total()},
          {"free", localSlotsFree() + pool_.free()},
          {"nodes", nodes}};
}

std::optional<std::string> JobHost::slotsLacking(std::uint32_t groups) const {
  const std::uint32_t local = localSlotsFree();
  if (groups <= local + pool_.free()) return std::nullopt;
  std::string text = "the job needs " + std::to_string(groups) + " group PS(es), ";
  if (pool_.nodes().empty()) {
    text += std::to_string(local) + " of max_group_slots " + std::to_string(cfg_.max_group_slots) +
            " are free";
  } else {
    text += std::to_string(local + pool_.free()) + " are free (" + std::to_string(local) +
            " of max_group_slots " + std::to_string(cfg_.max_group_slots) + " here, " +
            std::to_string(pool_.free()) + " of " + std::to_string(pool_.total()) + " on " +
            std::to_string(pool_.nodes().size()) + " node daemon(s))";
  }
  return text;
}

}  // namespace groupsgd::jobs
