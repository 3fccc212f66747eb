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

std::size_t StragglerDetector::windowKeep() const {
  return std::max<std::size_t>(cfg_.erratic_window, cfg_.erratic_clear_window);
}

void StragglerDetector::addStep(std::uint64_t id, double step_ms, std::uint64_t step) {
  if (!(step_ms > 0)) return;
  State& s = state_[id];
  s.recent.push_back(step_ms);
  s.last_step = step;
  ++s.seen;
  while (s.recent.size() > keep()) s.recent.pop_front();
  s.window.push_back(step_ms);
  while (s.window.size() > windowKeep()) s.window.pop_front();
}

void StragglerDetector::summarizeWindow(State& s, double reference) const {
  const std::size_t size = s.window.size();
  const std::size_t onset_n = cfg_.erratic_window, clear_n = cfg_.erratic_clear_window;
  const std::size_t from = size - std::min(size, std::max(onset_n, clear_n));
  double onset_sum = 0, clear_sum = 0;
  std::uint32_t spikes = 0;
  for (std::size_t i = from; i < size; ++i) {  // oldest first, as the sums always were
    const double t = s.window[i];
    if (i + clear_n >= size) clear_sum += t;
    if (i + onset_n >= size) {
      onset_sum += t;
      spikes += t >= cfg_.enter_ratio * reference;
    }
  }
  s.onset_mean = onset_n > 0 && size >= onset_n ? onset_sum / static_cast<double>(onset_n) : 0;
  s.clear_mean = clear_n > 0 && size >= clear_n ? clear_sum / static_cast<double>(clear_n) : 0;
  s.spikes = spikes;
}

bool StragglerDetector::judgeErratic(const State& s, double mean_reference) const {
  // Onset on the last window; clearing on the longer one (flapping costs a regroup each
  // way: with 10% of steps paused 30x, the mean of 192 steps falls to 1.5x about never).
  if (cfg_.erratic_window == 0 || !(mean_reference > 0)) return false;
  if (s.straggler && !s.erratic) return false;  // a run-rule straggler clears by the run rule
  if (!s.straggler) {
    return s.onset_mean > 0 && s.onset_mean >= cfg_.enter_ratio * mean_reference &&
           s.spikes >= cfg_.erratic_spikes;
  }
  return s.clear_mean > 0 && s.clear_mean <= cfg_.exit_ratio * mean_reference;
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
  for (auto& [id, s] : state_) {
    summarizeWindow(s, reference);
    if (s.onset_mean > 0) means.push_back(s.onset_mean);
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
      if (judgeErratic(s, mean_reference)) {
        s.straggler = s.erratic = false;
        out.push_back({id, false, s.last_step, s.ratio, cfg_.erratic_clear_window, true, 0});
      }
      continue;
    }
    if ((!s.straggler && all_slow) || (s.straggler && all_normal)) {
      s.straggler = !s.straggler;
      out.push_back({id, s.straggler, s.last_step, s.ratio, need});
      continue;
    }
    if (!s.straggler && judgeErratic(s, mean_reference)) {
      s.straggler = s.erratic = true;
      const double mean_ratio = s.onset_mean / mean_reference;
      out.push_back({id, true, s.last_step, mean_ratio, cfg_.erratic_window, true, s.spikes});
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
