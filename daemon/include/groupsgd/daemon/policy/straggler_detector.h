// Persistent-straggler detection with hysteresis. Each window, a worker's ratio
// r = (its step time at the nominal batch) / (median over all workers) is fed in; it is
// flagged a straggler after `enter_windows` consecutive windows with r > enter_ratio and
// cleared after `exit_windows` consecutive windows with r < exit_ratio. A single slow
// window (a transient stall) changes nothing: the step deadline absorbs those.
#pragma once

#include <cstdint>
#include <map>
#include <span>

#include "groupsgd/daemon/policy/speed_model.h"

namespace groupsgd::daemon::policy {

struct StragglerConfig {
  double enter_ratio = 1.5;
  std::uint32_t enter_windows = 3;
  double exit_ratio = 1.2;
  std::uint32_t exit_windows = 5;
};

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerConfig cfg = {}) : cfg_(cfg) {}
  // One window of estimates; returns true when any worker's flag changed.
  bool update(std::span<const WorkerSpeed> speeds, std::uint32_t nominal_batch);
  bool isStraggler(std::uint64_t id) const;
  std::size_t stragglers() const;
  void forget(std::uint64_t id) { state_.erase(id); }
  const StragglerConfig& config() const { return cfg_; }
  void setConfig(const StragglerConfig& cfg) { cfg_ = cfg; }

 private:
  struct State {
    bool straggler = false;
    std::uint32_t above = 0;  // consecutive windows over enter_ratio
    std::uint32_t below = 0;  // consecutive windows under exit_ratio
    double ratio = 1;
  };
  StragglerConfig cfg_;
  std::map<std::uint64_t, State> state_;
};

}  // namespace groupsgd::daemon::policy
