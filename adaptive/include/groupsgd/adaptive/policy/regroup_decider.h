// When to regroup. Batches are rebalanced inside groups every window (batch_allocation.h);
// a step cutoff at the group PS drops what comes too late; the grouping changes only when
// (a) the caller forces it (membership changed once the trainers were split into groups;
// a stage change whose stage allows fewer groups than are in force), or (b) the straggler
// set or the stage changed AND the new plan's useful progress beats the current
// grouping's by the margin AND the last regroup is older than the minimum interval. Transient
// stalls never reach here (the detector needs consecutive windows). Pure; time is passed in.
#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "groupsgd/adaptive/policy/grouping.h"

namespace groupsgd::adaptive::policy {

struct RegroupConfig {
  double min_gain = 0.10;                        // predicted useful-progress gain required
  std::chrono::milliseconds min_interval{5000};  // between regroups (not membership changes)
};

struct RegroupDecision {
  GroupPlan plan;
  double predicted_gain = 0;  // (new useful - current useful) / current useful
  std::string cause;
};

class RegroupDecider {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RegroupDecider(RegroupConfig cfg = {}) : cfg_(cfg) {}
  const RegroupConfig& config() const { return cfg_; }
  void setConfig(const RegroupConfig& cfg) { cfg_ = cfg; }

  // trigger: why the caller asks ("stragglers changed", "stage fine", "worker 3 joined").
  // forced: membership changed or an operator asked; skips the gain and interval checks.
  std::optional<RegroupDecision> decide(std::span<const WorkerSpeed> speeds,
                                        const std::vector<std::vector<std::uint64_t>>& current,
                                        const PlanConfig& plan_cfg, const std::string& trigger,
                                        bool forced, Clock::time_point now);
  // True while the last regroup is younger than the minimum interval.
  bool coolingDown(Clock::time_point now) const {
    return last_ && now - *last_ < cfg_.min_interval;
  }
  // Records that a regroup was carried out at `now`.
  void applied(Clock::time_point now) { last_ = now; }

 private:
  RegroupConfig cfg_;
  std::optional<Clock::time_point> last_;
};

// Two groupings are the same if they have the same member sets (order ignored).
bool sameGrouping(const std::vector<std::vector<std::uint64_t>>& a,
                  const std::vector<std::vector<std::uint64_t>>& b);

}  // namespace groupsgd::adaptive::policy
