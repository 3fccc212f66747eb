// How fast each worker is: an affine step-time model t(b) = a + b / v (a = fixed
// overhead per step in ms, v = samples per ms), fitted from a window of recent steps.
// Robust: the window drops its extremes (trimmed) before fitting, so one stall does not
// move the estimate. Pure policy code, no sockets; owned by the coordinator thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <vector>

namespace groupsgd::adaptive::policy {

struct WorkerSpeed {
  std::uint64_t id = 0;
  double overhead_ms = 0;     // a: per-step time that does not scale with the batch
  double samples_per_ms = 0;  // v: throughput of the batch-dependent part
  // Step time at batch b.
  double stepMs(double b) const { return overhead_ms + b / samples_per_ms; }
};

struct StepSample {
  std::uint32_t batch = 0;  // one step, or the means of a heartbeat's steps
  double compute_ms = 0;    // batch-dependent work (incl. emulated device time)
  double comm_ms = 0;       // push + reply time minus barrier wait
};

class SpeedEstimator {
 public:
  explicit SpeedEstimator(std::size_t window = 32, double trim = 0.2)
      : window_(window), trim_(trim) {}
  void add(const StepSample& s);
  // Samples the fit uses: the newest `window` (fewer after keepLast).
  std::size_t samples() const { return fit_count_; }
  bool ready(std::size_t min_samples) const { return fit_count_ >= min_samples; }
  // The fit forgets all but the newest n samples: the worker's speed changed (a detected
  // onset or recovery), and the older samples describe a worker that no longer exists.
  // The stall mean (below) still looks at its whole window.
  void keepLast(std::size_t n) { fit_count_ = std::min(fit_count_, n); }
  // An erratic worker's pauses are part of its speed: counted, their mean per step over
  // the last `stall_window` steps (the excess over the fitted model, which the trimming
  // leaves out) is added to the overhead a. Off by default: a one-off stall is noise.
  void countStalls(bool on) { count_stalls_ = on; }
  bool countsStalls() const { return count_stalls_; }
  // The fitted model. With one batch size in the window the split between a and v is
  // not identifiable; then a = trimmed mean comm time and v = b / trimmed compute.
  WorkerSpeed estimate(std::uint64_t id) const;

 private:
  static constexpr std::size_t kStallWindow = 64;
  std::size_t window_;
  double trim_;
  // The last max(window, kStallWindow) steps, newest last: the fit reads the newest
  // fit_count_ of them, the stall mean the newest kStallWindow.
  std::deque<StepSample> steps_;
  std::size_t fit_count_ = 0;
  bool count_stalls_ = false;
  // Mean excess of the newest kStallWindow compute times over the model (>= 0).
  double meanStallMs(const WorkerSpeed& w, double comm_ms) const;
};

// Trimmed mean: sorts, drops `trim` of the values at each end, averages the rest.
double trimmedMean(std::vector<double> values, double trim);

}  // namespace groupsgd::adaptive::policy
