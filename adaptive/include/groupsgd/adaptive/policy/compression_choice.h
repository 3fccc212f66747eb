// Compression chosen per group from measured link speed (compress_gradients = auto,
// docs/adaptive.md, "Compression chosen per group"). fp16 halves the push; it pays when
// the bytes are what a step waits for (the ASHL ablation, every link at 200 Mbit/s: 0.76x
// the time) and costs when they are not (a fixed delay per exchange on loopback: 1.20x).
// A round trip alone cannot tell bandwidth from latency, so the choice is tried, over
// windows of trial_steps steps of every member (each member's mean round trip over its
// window, from its running totals):
//   dense -> fp16 when the slowest member's window measures below the threshold
//     (bytes x 8 / round trip, a lower bound of its link's rate);
//   fp16 on trial -> kept when that member's round trip over the next window shrank by
//     at least min_saving (bandwidth-bound: fewer bytes, less time), else back to dense
//     for good (latency-bound: the bytes do not matter, the encoding only costs);
//   fp16 kept -> dense when the slowest link measures above threshold x (1 + hysteresis).
// Pure; the coordinator feeds it once per control window.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace groupsgd::adaptive::policy {

// One member's running totals: its steps and the round trips they took without the
// barrier wait (sum of heartbeat commMs x steps), and the bytes of one of its steps.
struct LinkSample {
  std::uint64_t worker = 0;
  std::uint64_t steps = 0;
  double total_comm_ms = 0;
  double bytes_per_step = 0;
};

// The link speed a round trip of `comm_ms` for `bytes` shows, in Mbit/s (bytes x 8 /
// time). The round trip includes latency and the servers' work, so this is a lower bound
// of the link's rate. Nullopt for a round trip of no time or no bytes.
std::optional<double> linkMbit(double bytes, double comm_ms);

struct CompressionTuning {
  double threshold_mbit = 1000;
  double hysteresis = 0.25;        // a kept fp16 goes back above threshold x (1 + this)
  double min_saving = 0.10;        // a trial keeps fp16 when the round trip shrank this much
  std::uint64_t min_steps = 10;    // a member's window starts after this many steps
  std::uint64_t trial_steps = 20;  // steps of every member per window
};

// A group's compression state, kept by the coordinator between windows.
struct GroupCompressionState {
  enum class Phase { kDense, kTrial, kFp16, kLatencyBound };
  struct Mark {
    std::uint64_t steps = 0;
    double total_comm_ms = 0;
  };
  Phase phase = Phase::kDense;
  std::map<std::uint64_t, Mark> window;  // where each member's current window began
  double slowest_mbit = 0;               // the last window's slowest member
  std::uint64_t slowest_worker = 0;
  double dense_comm_ms = 0;  // that member's mean round trip when the trial began
  double trial_comm_ms = 0;  // ... and over the trial
  bool fp16() const { return phase == Phase::kTrial || phase == Phase::kFp16; }
};
const char* compressionPhaseName(GroupCompressionState::Phase p);

// One control window: updates `s` from the members' totals; returns why the encoding
// changed (nullopt: it did not, or a window is still running).
std::optional<std::string> stepCompression(GroupCompressionState& s,
                                           const std::vector<LinkSample>& members,
                                           const CompressionTuning& t);

}  // namespace groupsgd::adaptive::policy
