#include "groupsgd/groupps/step_cutoff.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace groupsgd::groupps {

namespace {

std::chrono::microseconds medianOf(std::vector<std::chrono::microseconds> v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace

void StepCutoff::configure(const StepCutoffConfig& cfg) {
  cfg_ = cfg;
  cfg_.window = std::max<std::size_t>(1, cfg_.window);
  cfg_.min_samples = std::clamp<std::size_t>(cfg_.min_samples, 1, cfg_.window);
}

void StepCutoff::setMembers(std::vector<std::uint64_t> ids) {
  std::sort(ids.begin(), ids.end());
  if (ids == members_) return;
  members_ = std::move(ids);
  reset();
}

void StepCutoff::reset() {
  quorum_times_.clear();
  quorum_in_ = false;
}

std::size_t StepCutoff::maxLate(std::size_t members) const {
  if (cfg_.factor <= 0) return 0;
  return static_cast<std::size_t>(std::floor(static_cast<double>(members) * cfg_.late_fraction));
}

void StepCutoff::stepReleased(Clock::time_point released) {
  released_ = released;
  quorum_in_ = false;
}

void StepCutoff::pushArrived(std::size_t arrivals, std::size_t members, Clock::time_point now) {
  const std::size_t late = maxLate(members);
  if (late == 0 || quorum_in_ || !released_ || arrivals + late < members) return;
  quorum_in_ = true;
  quorum_times_.push_back(std::chrono::duration_cast<std::chrono::microseconds>(now - *released_));
  if (quorum_times_.size() > cfg_.window) quorum_times_.pop_front();
}

std::optional<std::chrono::microseconds> StepCutoff::allowance() const {
  if (cfg_.factor <= 0 || quorum_times_.size() < cfg_.min_samples) return std::nullopt;
  std::vector<std::chrono::microseconds> v(quorum_times_.begin(), quorum_times_.end());
  const auto median = medianOf(v);
  for (auto& x : v) x = x > median ? x - median : median - x;
  const auto mad = medianOf(std::move(v));
  // The factor bounds what one pause costs; median + 4 MAD keeps a noisy but healthy
  // group's ordinary spread from being cut.
  const auto scaled = std::chrono::microseconds(
      static_cast<std::int64_t>(static_cast<double>(median.count()) * cfg_.factor));
  return std::max(scaled, median + 4 * mad);
}

std::optional<StepCutoff::Clock::time_point> StepCutoff::deadline() const {
  if (!quorum_in_ || !released_) return std::nullopt;
  auto a = allowance();
  if (!a) return std::nullopt;
  return *released_ + *a;
}

}  // namespace groupsgd::groupps
