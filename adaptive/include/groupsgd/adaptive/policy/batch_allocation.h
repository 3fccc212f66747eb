// Per-worker batch sizes inside a group so that members finish a step together:
// b_i = v_i (T - a_i), T chosen so that sum b_i = B_g, each b_i clamped to [b_min, b_max]
// (water-filling), rounded so the sum is exactly B_g. And the damped controller that
// moves current batches toward that target without oscillating. Pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "groupsgd/adaptive/policy/speed_model.h"

namespace groupsgd::adaptive::policy {

struct BatchBounds {
  std::uint32_t min = 4;
  std::uint32_t max = 1024;
};

// Target batches (same order as members). sum == total whenever the bounds allow it.
std::vector<std::uint32_t> allocateBatches(std::span<const WorkerSpeed> members,
                                           std::uint32_t total, BatchBounds bounds);
// Step time of a group with these batches: its slowest member.
double groupStepMs(std::span<const WorkerSpeed> members, std::span<const std::uint32_t> batches);

struct DampingConfig {
  double gain = 0.5;         // move this fraction of the way to the target
  double deadband = 0.10;    // leave a batch alone if within 10% of its target
  double max_change = 0.25;  // at most +-25% per update
};

// One controller update; returns the new batches (sum preserved exactly).
std::vector<std::uint32_t> dampedUpdate(std::span<const std::uint32_t> current,
                                        std::span<const std::uint32_t> target, BatchBounds bounds,
                                        const DampingConfig& cfg);

// Rounds non-negative reals to integers within bounds with an exact sum (largest remainder).
std::vector<std::uint32_t> roundToSum(std::span<const double> values, std::uint32_t total,
                                      BatchBounds bounds);

}  // namespace groupsgd::adaptive::policy
