#include "groupsgd/adaptive/policy/straggler_detector.h"

#include <algorithm>

namespace groupsgd::adaptive::policy {

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
  const std::size_t early_n = std::min(cfg_.erratic_early_window, cfg_.erratic_window);
  const std::size_t from = size - std::min(size, std::max(onset_n, clear_n));
  double onset_sum = 0, clear_sum = 0, early_sum = 0;
  std::uint32_t spikes = 0, early_spikes = 0;
  for (std::size_t i = from; i < size; ++i) {  // oldest first, as the sums always were
    const double t = s.window[i];
    const bool spike = t >= cfg_.enter_ratio * reference;
    if (i + clear_n >= size) clear_sum += t;
    if (i + onset_n >= size) {
      onset_sum += t;
      spikes += spike;
    }
    if (i + early_n >= size) {
      early_sum += t;
      early_spikes += spike;
    }
  }
  s.onset_mean = onset_n > 0 && size >= onset_n ? onset_sum / static_cast<double>(onset_n) : 0;
  s.clear_mean = clear_n > 0 && size >= clear_n ? clear_sum / static_cast<double>(clear_n) : 0;
  // The early window starts after the warm-up (a process's first steps are slow).
  s.early_mean = early_n > 0 && size >= early_n && s.seen >= early_n + cfg_.warmup_steps
                     ? early_sum / static_cast<double>(early_n)
                     : 0;
  s.spikes = spikes;
  s.early_spikes = early_spikes;
}

StragglerDetector::ErraticOnset StragglerDetector::erraticOnset(const State& s,
                                                                const MeanReferences& refs) const {
  if (cfg_.erratic_window == 0 || s.straggler) return ErraticOnset::kNone;
  if (refs.full > 0 && s.onset_mean > 0 && s.onset_mean >= cfg_.enter_ratio * refs.full &&
      s.spikes >= cfg_.erratic_spikes) {
    return ErraticOnset::kFull;
  }
  // Before the full window has filled (or beside it): the stricter early rule.
  if (refs.early > 0 && s.early_mean > 0 && s.early_mean >= cfg_.erratic_early_ratio * refs.early &&
      s.early_spikes >= cfg_.erratic_spikes) {
    return ErraticOnset::kEarly;
  }
  return ErraticOnset::kNone;
}

bool StragglerDetector::erraticCleared(const State& s, const MeanReferences& refs) const {
  // Clearing on the longer window (flapping costs a regroup each way: with 10% of steps
  // paused 30x, the mean of 192 steps falls to 1.5x about never).
  return refs.full > 0 && s.clear_mean > 0 && s.clear_mean <= cfg_.exit_ratio * refs.full;
}

namespace {

// The 40th percentile of the positive values (0 with fewer than two).
double fortiethPercentile(std::vector<double> v) {
  if (v.size() < 2) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) * 2 / 5];
}

}  // namespace

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
  std::vector<double> means, early_means;
  for (auto& [id, s] : state_) {
    summarizeWindow(s, reference);
    if (s.onset_mean > 0) means.push_back(s.onset_mean);
    if (s.early_mean > 0) early_means.push_back(s.early_mean);
  }
  const MeanReferences refs{fortiethPercentile(std::move(means)),
                            fortiethPercentile(std::move(early_means))};
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
      if (erraticCleared(s, refs)) {
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
    if (const ErraticOnset onset = erraticOnset(s, refs); onset != ErraticOnset::kNone) {
      s.straggler = s.erratic = true;
      const bool full = onset == ErraticOnset::kFull;
      const double mean_ratio = full ? s.onset_mean / refs.full : s.early_mean / refs.early;
      out.push_back({id, true, s.last_step, mean_ratio,
                     full ? cfg_.erratic_window : cfg_.erratic_early_window, true,
                     full ? s.spikes : s.early_spikes});
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

}  // namespace groupsgd::adaptive::policy
