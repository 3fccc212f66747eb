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
  s.window.push_back(step_ms);
  while (s.window.size() > 2 * std::size_t{cfg_.erratic_window}) s.window.pop_front();
}

double StragglerDetector::windowMean(const State& s, std::size_t n) {
  if (s.window.size() < n || n == 0) return 0;
  double sum = 0;
  for (auto it = s.window.end() - static_cast<std::ptrdiff_t>(n); it != s.window.end(); ++it) {
    sum += *it;
  }
  return sum / static_cast<double>(n);
}

bool StragglerDetector::judgeErratic(State& s, double reference, double mean_reference,
                                     std::uint32_t* spikes) const {
  // Onset on the last window; clearing on two (flapping costs a regroup each way: with
  // 10% of steps paused 30x, the mean of 192 steps falls to 1.5x about never).
  const std::size_t n = s.straggler ? 2 * std::size_t{cfg_.erratic_window} : cfg_.erratic_window;
  if (cfg_.erratic_window == 0 || s.window.size() < n || !(mean_reference > 0)) return false;
  if (s.straggler && !s.erratic) return false;  // a run-rule straggler clears by the run rule
  *spikes = 0;
  for (auto it = s.window.end() - static_cast<std::ptrdiff_t>(n); it != s.window.end(); ++it) {
    *spikes += *it >= cfg_.enter_ratio * reference;
  }
  const double mean = windowMean(s, n);
  if (!s.straggler) {
    return mean >= cfg_.enter_ratio * mean_reference && *spikes >= cfg_.erratic_spikes;
  }
  return mean <= cfg_.exit_ratio * mean_reference;
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
  // The erratic rule compares means with means: load that stretches every worker's steps
  // now and then (a busy machine) moves the reference with them.
  std::vector<double> means;
  for (const auto& [id, s] : state_) {
    if (double m = windowMean(s, cfg_.erratic_window); m > 0) means.push_back(m);
  }
  double mean_reference = 0;
  if (means.size() >= 2) {
    std::sort(means.begin(), means.end());
    mean_reference = means[(means.size() - 1) * 2 / 5];
  }
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
    if (s.erratic) {
      // Cleared by its window only (see the header), or held by a run of slow steps.
      std::uint32_t spikes = 0;
      if (judgeErratic(s, reference, mean_reference, &spikes)) {
        s.straggler = s.erratic = false;
        out.push_back({id, false, s.last_step, s.ratio, 2 * cfg_.erratic_window, true, 0});
      }
      continue;
    }
    if ((!s.straggler && all_slow) || (s.straggler && all_normal)) {
      s.straggler = !s.straggler;
      out.push_back({id, s.straggler, s.last_step, s.ratio, need});
      continue;
    }
    std::uint32_t spikes = 0;
    if (!s.straggler && judgeErratic(s, reference, mean_reference, &spikes)) {
      s.straggler = s.erratic = true;
      const double mean_ratio = windowMean(s, cfg_.erratic_window) / mean_reference;
      out.push_back({id, true, s.last_step, mean_ratio, cfg_.erratic_window, true, spikes});
    }
  }
  return out;
}

bool StragglerDetector::isStraggler(std::uint64_t id) const {
  auto it = state_.find(id);
  return it != state_.end() && it->second.straggler;
}

bool StragglerDetector::isErratic(std::uint64_t id) const {
  auto it = state_.find(id);
  return it != state_.end() && it->second.erratic;
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
