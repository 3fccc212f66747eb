#include "groupsgd/adaptive/policy/straggler_detector.h"

#include <algorithm>

namespace groupsgd::daemon::policy {

double medianOfLast(const std::deque<double>& values, std::size_t n) {
  if (values.empty()) return 0;
  n = std::min(n, values.size());
  std::vector<double> v(values.end() - static_cast<std::ptrdiff_t>(n), values.end());
  std::sort(v.begin(), v.end());
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::size_t StragglerDetector::keep() const {
  return std::max<std::size_t>({1, cfg_.enter_steps, cfg_.exit_steps});
}

void StragglerDetector::addStep(std::uint64_t id, double step_ms, std::uint64_t step) {
  if (!(step_ms > 0)) return;
  State& s = state_[id];
  s.recent.push_back(step_ms);
  s.last_step = step;
  ++s.seen;
  while (s.recent.size() > keep()) s.recent.pop_front();
}

std::vector<StragglerChange> StragglerDetector::evaluate() {
  std::vector<StragglerChange> out;
  std::vector<double> levels;
  for (const auto& [id, s] : state_) {
    if (!s.recent.empty()) levels.push_back(medianOfLast(s.recent, keep()));
  }
  if (levels.size() < 2) return out;
  std::sort(levels.begin(), levels.end());
  const double reference = levels[(levels.size() - 1) * 2 / 5];
  if (!(reference > 0)) return out;
  for (auto& [id, s] : state_) {
    if (s.recent.empty()) continue;
    s.ratio = medianOfLast(s.recent, keep()) / reference;
    const std::uint32_t need = s.straggler ? cfg_.exit_steps : cfg_.enter_steps;
    if (need == 0 || s.recent.size() < need || s.seen < cfg_.warmup_steps) continue;
    const auto first = s.recent.end() - static_cast<std::ptrdiff_t>(need);
    const bool all_slow = std::all_of(first, s.recent.end(),
                                      [&](double t) { return t >= cfg_.enter_ratio * reference; });
    const bool all_normal = std::all_of(first, s.recent.end(),
                                        [&](double t) { return t <= cfg_.exit_ratio * reference; });
    if ((!s.straggler && all_slow) || (s.straggler && all_normal)) {
      s.straggler = !s.straggler;
      out.push_back({id, s.straggler, s.last_step, s.ratio, need});
    }
  }
  return out;
}

bool StragglerDetector::isStraggler(std::uint64_t id) const {
  auto it = state_.find(id);
  return it != state_.end() && it->second.straggler;
}

std::uint64_t StragglerDetector::seen(std::uint64_t id) const {
  auto it = state_.find(id);
  return it != state_.end() ? it->second.seen : 0;
}

double StragglerDetector::ratio(std::uint64_t id) const {
  auto it = state_.find(id);
  return it != state_.end() ? it->second.ratio : 1.0;
}

std::size_t StragglerDetector::stragglers() const {
  std::size_t n = 0;
  for (const auto& [id, s] : state_) n += s.straggler;
  return n;
}

}  // namespace groupsgd::daemon::policy
