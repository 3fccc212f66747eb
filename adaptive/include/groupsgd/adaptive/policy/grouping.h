// The grouping policy: which workers train together. Workers are sorted by their step
// time at the nominal batch; groups are contiguous runs of that order (a slow worker only
// slows workers like it). For each group count G <= G_max a dynamic programme picks the
// boundaries that maximise total throughput (each group's batches water-filled, see
// batch_allocation.h); then G is chosen to maximise useful progress
//   U = throughput / (1 + lambda * mean expected staleness),
// with E[tau_g] = P_g * sum_{h != g} 1 / P_h, P_g = K_g * T_g the exchange period in time,
// subject to max_g E[tau_g] <= the staleness bound. Faster groups get proportionally more
// local steps per exchange (K_g = K * T_slowest / T_g, capped) so every group exchanges
// about equally often and E[tau] stays near G - 1. Pure functions of measured speeds.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "groupsgd/adaptive/policy/batch_allocation.h"
#include "groupsgd/adaptive/policy/speed_model.h"

namespace groupsgd::adaptive::policy {

struct PlanConfig {
  std::uint32_t max_groups = 4;         // G_max
  std::uint32_t base_batch = 32;        // b0: a group of n workers has n * b0 samples per step
  BatchBounds bounds;                   // per-worker batch limits
  double staleness_penalty = 0.1;       // lambda
  double staleness_bound = 3.0;         // refuse plans whose max E[tau] is above this
  std::size_t max_classes = 64;         // beyond this many workers, plan over speed classes
  std::uint32_t exchange_period = 1;    // K of the slowest group
  std::uint32_t max_period_factor = 8;  // a faster group's K is at most this times K
};

struct GroupPlan {
  std::vector<std::vector<std::uint64_t>> groups;   // worker ids per group
  std::vector<std::vector<std::uint32_t>> batches;  // per worker, aligned with groups
  std::vector<double> step_ms;                      // per group
  std::vector<double> staleness;                    // per group, expected tau
  std::vector<std::uint32_t> exchange_periods;      // per group, K_g
  double throughput = 0;                            // samples / s over all groups
  double mean_staleness = 0;                        // update-rate weighted
  double max_staleness = 0;
  double useful = 0;             // throughput discounted by staleness
  std::string describe() const;  // "G=2 [1,2,3|4] ..." for logs
};

// Evaluates a given grouping (any membership) with water-filled batches.
GroupPlan evaluatePlan(std::span<const WorkerSpeed> speeds,
                       const std::vector<std::vector<std::uint64_t>>& groups,
                       const PlanConfig& cfg);
// The best plan for these workers.
GroupPlan planGroups(std::span<const WorkerSpeed> speeds, const PlanConfig& cfg);

}  // namespace groupsgd::adaptive::policy
