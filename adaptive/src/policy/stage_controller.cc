#include "groupsgd/adaptive/policy/stage_controller.h"

#include <array>
#include <cmath>
#include <numeric>
#include <sstream>

#include "groupsgd/base/enum_names.h"

namespace groupsgd::adaptive::policy {

constexpr std::array<base::EnumName<Stage>, 3> kStageNames{{
    {Stage::kProfiling, "profiling"},
    {Stage::kCoarse, "coarse"},
    {Stage::kFine, "fine"},
}};

const char* stageName(Stage s) { return base::nameOf(kStageNames, s); }

std::uint32_t StageController::exchangePeriod() const {
  return stage_ == Stage::kCoarse ? cfg_.coarse_period : cfg_.fine_period;
}

std::uint32_t StageController::maxGroups() const {
  switch (stage_) {
    case Stage::kProfiling:
      return 1;
    case Stage::kCoarse:
      return cfg_.coarse_max_groups;
    case Stage::kFine:
      return cfg_.fine_max_groups;
  }
  return 1;
}

std::optional<StageChange> StageController::update(std::uint64_t min_worker_steps, double mean_loss,
                                                   std::uint64_t samples,
                                                   std::uint64_t sample_budget) {
  if (stage_ == Stage::kProfiling) {
    if (min_worker_steps < cfg_.profile_steps) return std::nullopt;
    stage_ = Stage::kCoarse;
    std::ostringstream os;
    os << "every worker has " << min_worker_steps << " profiled steps";
    return StageChange{stage_, os.str()};
  }
  if (stage_ != Stage::kCoarse) return std::nullopt;
  if (sample_budget > 0 &&
      static_cast<double>(samples) >= cfg_.fine_at_fraction * static_cast<double>(sample_budget)) {
    stage_ = Stage::kFine;
    return StageChange{
        stage_, "reached " + std::to_string(cfg_.fine_at_fraction) + " of the sample budget"};
  }
  if (!std::isfinite(mean_loss) || mean_loss <= 0) return std::nullopt;
  losses_.push_back(mean_loss);
  const std::size_t w = cfg_.loss_window;
  while (losses_.size() > 2 * w) losses_.pop_front();
  if (losses_.size() < 2 * w) return std::nullopt;
  const double older =
      std::accumulate(losses_.begin(), losses_.begin() + static_cast<std::ptrdiff_t>(w), 0.0) / w;
  const double newer =
      std::accumulate(losses_.begin() + static_cast<std::ptrdiff_t>(w), losses_.end(), 0.0) / w;
  const double improvement = (older - newer) / older;
  if (improvement >= cfg_.flat_threshold) return std::nullopt;
  stage_ = Stage::kFine;
  std::ostringstream os;
  os << "training loss flattened (" << older << " -> " << newer << ", " << improvement * 100
     << "% < " << cfg_.flat_threshold * 100 << "%)";
  return StageChange{stage_, os.str()};
}

}  // namespace groupsgd::adaptive::policy
