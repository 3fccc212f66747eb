// groupsgd-sim's engine: a window-by-window simulation of N workers whose true speeds
// follow a scenario (stragglers that appear, drift and recover), observed with noise and
// fed to the same AdaptiveController the daemon runs. It reports the throughput the
// chosen grouping and batches really achieve, against the ideal (every worker busy all
// the time), plus staleness, regroups and the controller's decision time.
// Thread rule: single-threaded, deterministic for a seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "groupsgd/adaptive/adaptive_config.h"
#include "groupsgd/common/status.h"

namespace groupsgd::adaptive {

struct SimConfig {
  std::uint32_t workers = 8;
  std::uint32_t windows = 120;
  // steady | straggler | link | recover | drift | lognormal | alternate
  std::string scenario = "straggler";
  std::uint32_t dwell_windows = 20;  // alternate: windows per phase
  double slowdown = 4.0;             // straggler factor
  double link_ms = 40.0;             // link scenario: extra fixed ms per step
  std::uint32_t stragglers = 1;      // how many workers the scenario affects
  double noise = 0.05;               // relative noise on each observation
  double window_ms = 1000;           // simulated time per control window
  std::uint64_t seed = 1;
  std::uint32_t base_batch = 32;
  AdaptiveConfig adaptive;
  bool per_window = false;  // also return one JSON object per window
};

struct SimResult {
  double throughput_ratio = 0;  // achieved / ideal samples per second, over the run
  double mean_staleness = 0;    // expected tau of the groupings used, time-weighted
  std::uint32_t regroups = 0;
  std::uint32_t final_groups = 0;
  double decision_ms_mean = 0;  // controller time per window
  double decision_ms_max = 0;
  nlohmann::json windows = nlohmann::json::array();
  nlohmann::json summary() const;
};

Result<SimResult> simulate(const SimConfig& cfg);

}  // namespace groupsgd::adaptive
