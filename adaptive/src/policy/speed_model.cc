#include "groupsgd/adaptive/policy/speed_model.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace groupsgd::adaptive::policy {

double trimmedMean(std::vector<double> values, double trim) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t cut = static_cast<std::size_t>(static_cast<double>(values.size()) * trim);
  const std::size_t lo = std::min(cut, (values.size() - 1) / 2);
  const std::size_t hi = values.size() - lo;
  return std::accumulate(values.begin() + static_cast<std::ptrdiff_t>(lo),
                         values.begin() + static_cast<std::ptrdiff_t>(hi), 0.0) /
         static_cast<double>(hi - lo);
}

void SpeedEstimator::add(const StepSample& s) {
  if (s.batch == 0 || !(s.compute_ms > 0)) return;
  steps_.push_back(s);
  while (steps_.size() > std::max(window_, kStallWindow)) steps_.pop_front();
  fit_count_ = std::min(fit_count_ + 1, window_);
}

double SpeedEstimator::meanStallMs(const WorkerSpeed& w, double comm_ms) const {
  const std::size_t n = std::min(steps_.size(), kStallWindow);
  if (n == 0 || !(w.samples_per_ms > 0)) return 0;
  const double fixed = w.overhead_ms - comm_ms;  // the batch-independent compute part
  double sum = 0;
  for (auto it = steps_.end() - static_cast<std::ptrdiff_t>(n); it != steps_.end(); ++it) {
    sum += std::max(0.0, it->compute_ms - fixed - it->batch / w.samples_per_ms);
  }
  return sum / static_cast<double>(n);
}

WorkerSpeed SpeedEstimator::estimate(std::uint64_t id) const {
  WorkerSpeed w;
  w.id = id;
  if (fit_count_ == 0) return w;
  // Trim by per-sample time so stalls (and unusually quick steps) are left out.
  std::vector<const StepSample*> kept;
  for (auto it = steps_.end() - static_cast<std::ptrdiff_t>(fit_count_); it != steps_.end(); ++it) {
    kept.push_back(&*it);
  }
  std::sort(kept.begin(), kept.end(), [](const StepSample* x, const StepSample* y) {
    return x->compute_ms / x->batch < y->compute_ms / y->batch;
  });
  const std::size_t cut = std::min(
      static_cast<std::size_t>(static_cast<double>(kept.size()) * trim_), (kept.size() - 1) / 2);
  std::vector<double> comm, per_sample;
  double sb = 0, st = 0, sbb = 0, sbt = 0;
  std::uint32_t bmin = ~0u, bmax = 0;
  const std::size_t n = kept.size() - 2 * cut;
  for (std::size_t i = cut; i < kept.size() - cut; ++i) {
    const double b = kept[i]->batch, t = kept[i]->compute_ms;
    sb += b;
    st += t;
    sbb += b * b;
    sbt += b * t;
    bmin = std::min(bmin, kept[i]->batch);
    bmax = std::max(bmax, kept[i]->batch);
    comm.push_back(kept[i]->comm_ms);
    per_sample.push_back(t / b);
  }
  const double comm_ms = trimmedMean(comm, trim_);
  const double nn = static_cast<double>(n);
  const double var = sbb - sb * sb / nn;
  // Least squares t = c + b / v only when the batches spread widely (>= 30% of the
  // mean) and the fit is plausible; timing noise on a narrow spread gives wild fits.
  const double mean_b = sb / nn, mean_t = st / nn;
  if (var > 0 && static_cast<double>(bmax - bmin) >= 0.3 * mean_b) {
    const double slope = (sbt - sb * st / nn) / var;  // ms per sample
    const double intercept = (st - slope * sb) / nn;
    if (slope > 0 && intercept >= 0 && intercept <= 0.5 * mean_t) {
      w.samples_per_ms = 1.0 / slope;
      w.overhead_ms = intercept + comm_ms;
      if (count_stalls_) w.overhead_ms += meanStallMs(w, comm_ms);
      return w;
    }
  }
  w.samples_per_ms = 1.0 / trimmedMean(per_sample, 0.0);  // already trimmed above
  w.overhead_ms = comm_ms;
  if (count_stalls_) w.overhead_ms += meanStallMs(w, comm_ms);
  return w;
}

}  // namespace groupsgd::adaptive::policy
