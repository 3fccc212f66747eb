#include "groupsgd/daemon/policy/straggler_detector.h"

#include <algorithm>
#include <vector>

namespace groupsgd::daemon::policy {

bool StragglerDetector::update(std::span<const WorkerSpeed> speeds, std::uint32_t nominal_batch) {
  if (speeds.empty()) return false;
  std::vector<double> t;
  for (const auto& s : speeds) t.push_back(s.stepMs(nominal_batch));
  std::vector<double> sorted = t;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2),
                   sorted.end());
  const double median = sorted[sorted.size() / 2];
  bool changed = false;
  for (std::size_t i = 0; i < speeds.size(); ++i) {
    State& s = state_[speeds[i].id];
    s.ratio = median > 0 ? t[i] / median : 1;
    s.above = s.ratio > cfg_.enter_ratio ? s.above + 1 : 0;
    s.below = s.ratio < cfg_.exit_ratio ? s.below + 1 : 0;
    if (!s.straggler && s.above >= cfg_.enter_windows) {
      s.straggler = true;
      changed = true;
    } else if (s.straggler && s.below >= cfg_.exit_windows) {
      s.straggler = false;
      changed = true;
    }
  }
  return changed;
}

bool StragglerDetector::isStraggler(std::uint64_t id) const {
  auto it = state_.find(id);
  return it != state_.end() && it->second.straggler;
}

std::size_t StragglerDetector::stragglers() const {
  std::size_t n = 0;
  for (const auto& [id, s] : state_) n += s.straggler;
  return n;
}

}  // namespace groupsgd::daemon::policy
