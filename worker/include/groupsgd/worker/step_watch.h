// When a trainer should heartbeat early: after its first steps (so the coordinator can
// size batches at once) and when its own step times shift (a slowdown or a recovery), so
// the coordinator hears of a change within a few steps instead of a heartbeat period.
// A shift is `steps` consecutive steps all beyond `ratio` x (or all below 1 / ratio x)
// the reference: the median of the steps of the last report. One outlier step is not one.
// Pure; owned by the training loop.
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

namespace groupsgd::worker {

class StepWatch {
 public:
  explicit StepWatch(std::size_t steps = 3, double ratio = 1.5) : steps_(steps), ratio_(ratio) {}
  // One step's time at the reference batch (compute scaled to it, plus own communication).
  // True when an early heartbeat is due now.
  bool add(double step_ms);
  // A heartbeat went out with the steps added since the last one.
  void reported();
  // Registered again (a regroup or a new head): the first steps are reported early again.
  void restart();

 private:
  std::size_t steps_;
  double ratio_;
  std::deque<double> recent_;         // the last `steps_` steps
  std::vector<double> since_report_;  // steps since the last heartbeat
  double reference_ = 0;              // 0 = none yet
  std::size_t count_ = 0;             // steps since restart()
  std::size_t since_early_ = 0;       // steps since the last early heartbeat
  bool first_sent_ = false;
};

}  // namespace groupsgd::worker
