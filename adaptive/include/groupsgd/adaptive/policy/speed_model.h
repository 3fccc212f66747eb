// How fast each worker is: an affine step-time model t(b) = a + b / v (a = fixed
// overhead per step in ms, v = samples per ms), fitted from a window of recent steps.
// Robust: the window drops its extremes (trimmed) before fitting, so one stall does not
// move the estimate. Pure policy code, no sockets; owned by the coordinator thread.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace groupsgd::daemon::policy {

struct WorkerSpeed {
  std::uint64_t id = 0;
  double overhead_ms = 0;      // a: per-step time that does not scale with the batch
  double samples_per_ms = 0;   // v: throughput of the batch-dependent part
  // Step time at batch b.
  double stepMs(double b) const { return overhead_ms + b / samples_per_ms; }
};

struct StepSample {
  std::uint32_t batch = 0;  // one step, or the means of a heartbeat's steps
  double compute_ms = 0;  // batch-dependent work (incl. emulated device time)
  double comm_ms = 0;     // push + reply time minus barrier wait
};

class SpeedEstimator {
 public:
  explicit SpeedEstimator(std::size_t window = 32, double trim = 0.2)
      : window_(window), trim_(trim) {}
  void add(const StepSample& s);
  std::size_t samples() const { return samples_.size(); }
  bool ready(std::size_t min_samples) const { return samples_.size() >= min_samples; }
  // Forgets all but the newest n samples: the worker's speed changed (a detected onset or
  // recovery), and the older samples describe a worker that no longer exists.
  void keepLast(std::size_t n) {
    while (samples_.size() > n) samples_.pop_front();
  }
  // An erratic worker's pauses are part of its speed: counted, their mean per step over
  // the last `stall_window` steps (the excess over the fitted model, which the trimming
  // leaves out) is added to the overhead a. Off by default: a one-off stall is noise.
  void countStalls(bool on) { count_stalls_ = on; }
  bool countsStalls() const { return count_stalls_; }
  // The fitted model. With one batch size in the window the split between a and v is
  // not identifiable; then a = trimmed mean comm time and v = b / trimmed compute.
  WorkerSpeed estimate(std::uint64_t id) const;

 private:
  std::size_t window_;
  double trim_;
  std::deque<StepSample> samples_;
  static constexpr std::size_t kStallWindow = 64;
  std::deque<StepSample> history_;  // the last kStallWindow steps, for the stall mean
  bool count_stalls_ = false;
  // Mean excess of the history's compute times over the model (>= 0).
  double meanStallMs(const WorkerSpeed& w, double comm_ms) const;
};

// Trimmed mean: sorts, drops `trim` of the values at each end, averages the rest.
double trimmedMean(std::vector<double> values, double trim);

}  // namespace groupsgd::daemon::policy
