#include "groupsgd/adaptive/policy/regroup_decider.h"

#include <algorithm>

namespace groupsgd::adaptive::policy {

bool sameGrouping(const std::vector<std::vector<std::uint64_t>>& a,
                  const std::vector<std::vector<std::uint64_t>>& b) {
  // Canonical form: each group sorted, the groups sorted, empty ones left out. Contiguous
  // vectors, not sets of sets: this runs on every regroup decision (10,000 workers).
  auto canon = [](const std::vector<std::vector<std::uint64_t>>& g) {
    std::vector<std::vector<std::uint64_t>> out;
    out.reserve(g.size());
    for (const auto& members : g) {
      if (members.empty()) continue;
      out.push_back(members);
      std::sort(out.back().begin(), out.back().end());
      out.back().erase(std::unique(out.back().begin(), out.back().end()), out.back().end());
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  // Cheap first: different group sizes are different groupings (the usual case when a
  // plan regroups), without sorting any ids.
  auto sizes = [](const std::vector<std::vector<std::uint64_t>>& g) {
    std::vector<std::size_t> out;
    for (const auto& members : g) {
      if (!members.empty()) out.push_back(members.size());
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  if (sizes(a) != sizes(b)) return false;
  return canon(a) == canon(b);
}

std::optional<RegroupDecision> RegroupDecider::decide(
    std::span<const WorkerSpeed> speeds, const std::vector<std::vector<std::uint64_t>>& current,
    const PlanConfig& plan_cfg, const std::string& trigger, bool forced, Clock::time_point now) {
  if (!forced && last_ && now - *last_ < cfg_.min_interval) return std::nullopt;
  RegroupDecision d;
  d.plan = planGroups(speeds, plan_cfg);
  if (d.plan.groups.empty()) return std::nullopt;
  const GroupPlan now_plan = evaluatePlan(speeds, current, plan_cfg);
  d.predicted_gain =
      now_plan.useful > 0 ? (d.plan.useful - now_plan.useful) / now_plan.useful : 1.0;
  if (sameGrouping(d.plan.groups, current)) return std::nullopt;
  if (!forced && d.predicted_gain < cfg_.min_gain) return std::nullopt;
  d.cause = trigger;
  return d;
}

}  // namespace groupsgd::adaptive::policy
