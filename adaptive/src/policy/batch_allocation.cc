#include "groupsgd/adaptive/policy/batch_allocation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "water_level.h"

namespace groupsgd::adaptive::policy {
namespace {

double clampD(double x, double lo, double hi) { return std::min(std::max(x, lo), hi); }

}  // namespace

std::vector<std::uint32_t> roundToSum(std::span<const double> values, std::uint32_t total,
                                      BatchBounds bounds) {
  const std::size_t n = values.size();
  std::vector<std::uint32_t> out(n);
  if (n == 0) return out;
  std::int64_t sum = 0;
  std::vector<double> frac(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double f = std::floor(values[i]);
    frac[i] = values[i] - f;
    out[i] = static_cast<std::uint32_t>(clampD(f, bounds.min, bounds.max));
    sum += out[i];
  }
  // Hand out (or take back) the difference one sample at a time, largest remainder first.
  // Only the first |diff| of that order matter in the common case: select, do not sort.
  std::int64_t diff = static_cast<std::int64_t>(total) - sum;
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto by_frac = [&](std::size_t x, std::size_t y) { return frac[x] > frac[y]; };
  const auto need = static_cast<std::size_t>(
      std::min<std::int64_t>(std::llabs(diff), static_cast<std::int64_t>(n)));
  if (need > 0 && need < n) {
    auto pivot = diff > 0 ? order.begin() + static_cast<std::ptrdiff_t>(need)
                          : order.end() - static_cast<std::ptrdiff_t>(need);
    std::nth_element(order.begin(), pivot, order.end(), by_frac);
    if (diff > 0)
      std::sort(order.begin(), pivot, by_frac);
    else
      std::sort(pivot, order.end(), by_frac);
  }
  for (int pass = 0; diff != 0 && pass < 1000000; ++pass) {
    bool moved = false;
    for (std::size_t k = 0; k < n && diff != 0; ++k) {
      const std::size_t i = diff > 0 ? order[k] : order[n - 1 - k];
      if (diff > 0 && out[i] < bounds.max) {
        ++out[i];
        --diff;
        moved = true;
      } else if (diff < 0 && out[i] > bounds.min) {
        --out[i];
        ++diff;
        moved = true;
      }
    }
    if (!moved) break;  // the bounds make the exact sum impossible
  }
  return out;
}

std::vector<std::uint32_t> allocateBatches(std::span<const WorkerSpeed> members,
                                           std::uint32_t total, BatchBounds bounds) {
  const std::size_t n = members.size();
  if (n == 0) return {};
  const double bmin = bounds.min, bmax = bounds.max;
  auto filled = [&](double t) {
    double s = 0, slope = 0;
    for (const auto& m : members) {
      const double x = m.samples_per_ms * (t - m.overhead_ms);
      if (x <= bmin) {
        s += bmin;
      } else if (x >= bmax) {
        s += bmax;
      } else {
        s += x;
        slope += m.samples_per_ms;
      }
    }
    return std::pair<double, double>(s, slope);
  };
  // f(T) is non-decreasing and piecewise linear in T: find the level f(T) = total.
  // The search starts at the level no member's bounds would clamp (exact when none is):
  // sum of v (t - a) = total.
  double hi = 1, sum_v = 0, sum_va = 0;
  for (const auto& m : members) {
    hi = std::max(hi, m.overhead_ms + bounds.max / m.samples_per_ms);
    sum_v += m.samples_per_ms;
    sum_va += m.samples_per_ms * m.overhead_ms;
  }
  const double unclamped = sum_v > 0 ? (static_cast<double>(total) + sum_va) / sum_v : -1.0;
  hi = waterLevel(filled, static_cast<double>(total), 0.0, hi, 1e-9, 50, unclamped);
  std::vector<double> real(n);
  for (std::size_t i = 0; i < n; ++i) {
    real[i] =
        clampD(members[i].samples_per_ms * (hi - members[i].overhead_ms), bounds.min, bounds.max);
  }
  return roundToSum(real, total, bounds);
}

double groupStepMs(std::span<const WorkerSpeed> members, std::span<const std::uint32_t> batches) {
  double t = 0;
  for (std::size_t i = 0; i < members.size(); ++i) t = std::max(t, members[i].stepMs(batches[i]));
  return t;
}

std::vector<std::uint32_t> dampedUpdate(std::span<const std::uint32_t> current,
                                        std::span<const std::uint32_t> target, BatchBounds bounds,
                                        const DampingConfig& cfg) {
  const std::size_t n = current.size();
  const std::uint32_t total = std::accumulate(current.begin(), current.end(), 0u);
  std::vector<double> next(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double c = current[i], t = target[i];
    if (std::fabs(t - c) <= cfg.deadband * c) {
      next[i] = c;
      continue;
    }
    const double step = clampD(cfg.gain * (t - c), -cfg.max_change * c, cfg.max_change * c);
    next[i] = c + step;
  }
  // Renormalise to the group total, which the controller never changes.
  const double s = std::accumulate(next.begin(), next.end(), 0.0);
  if (s > 0) {
    for (auto& v : next) v *= static_cast<double>(total) / s;
  }
  return roundToSum(next, total, bounds);
}

}  // namespace groupsgd::adaptive::policy
