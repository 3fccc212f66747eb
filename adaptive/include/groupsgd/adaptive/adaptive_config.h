// The adaptive controller's configuration: part of the daemon's (DaemonConfig::adaptive,
// read from the `adaptive` object) and of the simulator's.
// Thread rule: a plain value.
#pragma once

#include <cstdint>

#include "groupsgd/adaptive/policy/stage_controller.h"
#include "groupsgd/adaptive/policy/straggler_detector.h"

namespace groupsgd::adaptive {

// Knobs of the adaptive coordinator (mode adaptive); docs/adaptive.md explains each.
struct AdaptiveConfig {
  std::uint32_t control_ms = 1000;      // one control window
  std::uint32_t estimator_window = 16;  // recent steps per worker speed estimate
  std::uint32_t min_samples = 3;        // samples before a worker's estimate is used
  std::uint32_t min_batch = 4;
  std::uint32_t max_batch = 512;
  double staleness_penalty = 0.1;  // lambda in useful = X / (1 + lambda E[tau])
  double staleness_bound = 3.0;    // max expected staleness of a plan
  double min_gain = 0.10;          // predicted gain needed to regroup
  std::uint32_t min_regroup_interval_ms = 5000;
  // Cap on a faster group's exchange period: K_g <= this x the slowest group's K. Low,
  // because a group with many local steps per exchange converges slower per sample
  // (docs/benchmarks.md, straggler: 8 made the 4x link straggler case 1.69x).
  std::uint32_t max_period_factor = 2;
  // Backup-worker semantics at the group PSes (docs/adaptive.md, "The step cutoff"): a
  // step whose quorum (all but floor(n x late fraction) members) is in waits at most
  // step_cutoff x the group's median release-to-quorum time for the rest; 0 = off.
  double step_cutoff = 1.5;
  double step_cutoff_late_fraction = 0.25;
  policy::StragglerConfig straggler;
  policy::StageConfig stages;
};

}  // namespace groupsgd::adaptive
