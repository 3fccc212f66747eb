// Training stages: coarse (exchange period K_coarse, up to G_coarse groups) -> fine
// (K_fine, up to G_fine groups). Workers are measured from their first steps while they
// train; an optional profiling stage before coarse (profile_steps > 0: everybody in one
// group with equal batches, no regrouping) is kept for comparison. Profiling ends after
// a number of steps per worker; coarse ends when the
// training loss flattens (relative improvement of the windowed mean below a threshold)
// or at a fraction of the sample budget. Pure; the coordinator feeds it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace groupsgd::adaptive::policy {

enum class Stage { kProfiling, kCoarse, kFine };
const char* stageName(Stage s);

struct StageConfig {
  std::uint32_t profile_steps = 0;  // > 0: a profiling stage of this many steps first
  // By default the coarse stage trains as the fine one: K = 4 with up to 4 groups was
  // never faster in quiet medians and 1.25x slower with an 8x straggler (docs/seeds.md).
  std::uint32_t coarse_period = 1;      // K in the coarse stage
  std::uint32_t coarse_max_groups = 2;  // G_max in the coarse stage
  std::uint32_t fine_period = 1;        // K in the fine stage
  std::uint32_t fine_max_groups = 2;    // G_max in the fine stage
  std::uint32_t loss_window = 10;       // loss observations per comparison window
  double flat_threshold = 0.02;         // coarse -> fine below this relative improvement
  double fine_at_fraction = 0.5;        // ... or at this fraction of the sample budget
};

struct StageChange {
  Stage to;
  std::string cause;
};

class StageController {
 public:
  explicit StageController(StageConfig cfg = {})
      : cfg_(cfg), stage_(cfg.profile_steps > 0 ? Stage::kProfiling : Stage::kCoarse) {}
  Stage stage() const { return stage_; }
  // The stage the previous head was in (a promoted standby).
  void resumeAt(Stage s) { stage_ = s; }
  const StageConfig& config() const { return cfg_; }
  std::uint32_t exchangePeriod() const;
  std::uint32_t maxGroups() const;
  // Called once per window with the minimum steps done by any worker, the mean training
  // loss of the window, samples trained and the sample budget (0 = none).
  std::optional<StageChange> update(std::uint64_t min_worker_steps, double mean_loss,
                                    std::uint64_t samples, std::uint64_t sample_budget);

 private:
  StageConfig cfg_;
  Stage stage_;
  std::deque<double> losses_;
};

}  // namespace groupsgd::adaptive::policy
