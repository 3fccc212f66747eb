// Persistent-straggler detection from per-step timings, with hysteresis. Each worker's
// steps are fed in as step times at the nominal batch (compute scaled to that batch plus
// the worker's own communication time; barrier waits excluded). The reference is the
// 40th percentile of every worker's level (the median of its last steps), so even half
// the workers slowing down at once cannot hide behind a median. A worker is judged once
// it has `warmup_steps` steps (a process starting beside nine others is slow at first).
// It is flagged a straggler once its last `enter_steps` steps are all >= enter_ratio x
// the reference and cleared once its last `exit_steps` steps are all <= exit_ratio x the
// reference: one outlier step (a stall, a descheduled process) changes nothing, and a
// worker between the two ratios keeps its state. Detection lags an onset or a recovery
// by `enter_steps` / `exit_steps` steps.
// An erratic worker (normal steps with long pauses now and then, e.g. 10% of steps paused
// 30x) never has three slow steps in a row, yet its mean step is several times the
// others'. So, beside the run rule, a worker whose last `erratic_window` steps average
// >= enter_ratio x the mean reference (the 40th percentile of every worker's window mean,
// so load that stretches everyone's steps is not a straggler), with at least
// `erratic_spikes` of them >= enter_ratio x the reference, is flagged too (an erratic
// straggler). It is cleared when the mean of its last `erratic_clear_window` steps (two
// windows) is <= exit_ratio x the mean reference: three quick steps in a row are what an
// erratic worker does most of the time, and clearing on them would flap.
// A full window takes seconds to fill, so an onset can also be decided early, on the last
// `erratic_early_window` steps, at the stricter `erratic_early_ratio` x the early mean
// reference (the 40th percentile of every worker's early-window mean) with as many spikes:
// a 4x erratic worker is flagged about three times sooner, while a healthy worker would
// need pauses worth twice its whole work in that window.
// Thread rule: owned by one thread (the coordinator's, or the simulator's).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

namespace groupsgd::adaptive::policy {

struct StragglerConfig {
  double enter_ratio = 2.0;
  std::uint32_t enter_steps = 3;
  // Wide: a recovered straggler still runs a small batch, and its fixed per-step costs
  // scaled up to the nominal batch make it look up to ~1.4x slower on a loaded machine.
  double exit_ratio = 1.5;
  std::uint32_t exit_steps = 3;
  std::uint32_t warmup_steps = 5;
  std::uint32_t erratic_window = 96;         // 0: no erratic judgement (a shorter window is noisy)
  std::uint32_t erratic_clear_window = 192;  // >= erratic_window
  std::uint32_t erratic_spikes = 3;
  std::uint32_t erratic_early_window = 32;  // 0: onsets on the full window only
  double erratic_early_ratio = 3.0;
};

// A worker whose flag changed: what was seen, at which of its steps.
struct StragglerChange {
  std::uint64_t worker = 0;
  bool straggler = false;    // true: became one; false: recovered
  std::uint64_t step = 0;    // the worker's step (its own count) that decided it
  double ratio = 1;          // its level / the reference when it was decided
  std::uint32_t steps = 0;   // consecutive steps beyond the ratio that decided it
  bool erratic = false;      // decided on the mean of the erratic window (steps = its size)
  std::uint32_t spikes = 0;  // erratic: steps of the window >= enter_ratio x the reference
};

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerConfig cfg = {}) : cfg_(cfg) {}
  // One step of a worker: its step time at the nominal batch and its step number.
  void addStep(std::uint64_t id, double step_ms, std::uint64_t step);
  // Judges every worker's newest steps against the reference; returns the changes.
  std::vector<StragglerChange> evaluate();
  bool isStraggler(std::uint64_t id) const;
  // Flagged by the erratic rule (its pauses are part of its speed).
  bool isErratic(std::uint64_t id) const;
  std::size_t stragglers() const;
  // Steps fed in for this worker, and whether it is past its warm-up.
  std::uint64_t seen(std::uint64_t id) const;
  bool warmedUp(std::uint64_t id) const { return seen(id) >= cfg_.warmup_steps; }
  // Level / reference of the last evaluate() (1 when unknown).
  double ratio(std::uint64_t id) const;
  void forget(std::uint64_t id) { state_.erase(id); }
  // A straggler the previous head had flagged (a promoted standby): flagged at once, its
  // recovery judged as any straggler's once its steps come in.
  void markStraggler(std::uint64_t id) { state_[id].straggler = true; }
  const StragglerConfig& config() const { return cfg_; }
  void setConfig(const StragglerConfig& cfg) { cfg_ = cfg; }

 private:
  struct State {
    bool straggler = false;
    bool erratic = false;       // flagged by the erratic rule
    std::deque<double> recent;  // newest last
    std::deque<double> window;  // the last erratic_window / erratic_clear_window steps
    std::uint64_t last_step = 0;
    std::uint64_t seen = 0;  // steps fed in
    double ratio = 1;
    // What evaluate() saw in one pass over the window (a mean is 0 while it holds fewer).
    double onset_mean = 0;           // of the last erratic_window steps
    double clear_mean = 0;           // of the last erratic_clear_window steps
    double early_mean = 0;           // of the last erratic_early_window steps
    std::uint32_t spikes = 0;        // of the last erratic_window steps, >= enter_ratio x reference
    std::uint32_t early_spikes = 0;  // the same, of the last erratic_early_window steps
  };
  // The 40th percentile of every worker's window mean (0 with fewer than two).
  struct MeanReferences {
    double full = 0;
    double early = 0;
  };
  // Which erratic window decides an onset (none: no onset).
  enum class ErraticOnset { kNone, kFull, kEarly };
  std::size_t keep() const;
  std::size_t windowKeep() const;
  // Fills s.onset_mean, s.clear_mean, s.early_mean and the spikes in one walk over the
  // window.
  void summarizeWindow(State& s, double reference) const;
  // The erratic rule for one worker (from its summary).
  ErraticOnset erraticOnset(const State& s, const MeanReferences& refs) const;
  bool erraticCleared(const State& s, const MeanReferences& refs) const;
  StragglerConfig cfg_;
  std::map<std::uint64_t, State> state_;
};

// Median of the last n values of a window (all of them when it holds fewer).
double medianOfLast(const std::deque<double>& values, std::size_t n);

}  // namespace groupsgd::adaptive::policy
