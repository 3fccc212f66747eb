#include "groupsgd/adaptive/policy/compression_choice.h"

#include <sstream>

namespace groupsgd::adaptive::policy {

std::optional<double> linkMbit(double bytes, double comm_ms) {
  if (!(comm_ms > 0) || !(bytes > 0)) return std::nullopt;
  return bytes * 8.0 / (comm_ms * 1000.0);  // bits per ms / 1000 = Mbit/s
}

const char* compressionPhaseName(GroupCompressionState::Phase p) {
  switch (p) {
    case GroupCompressionState::Phase::kDense:
      return "dense";
    case GroupCompressionState::Phase::kTrial:
      return "fp16 (trial)";
    case GroupCompressionState::Phase::kFp16:
      return "fp16";
    case GroupCompressionState::Phase::kLatencyBound:
      return "dense (latency-bound)";
  }
  return "?";
}

namespace {

struct Window {
  std::uint64_t worker = 0;
  double comm_ms = 0;  // mean round trip per step over the window
  double bytes = 0;
};

// The slowest member's window once every member (past min_steps) has made trial_steps
// steps in its window; nullopt while one is still short. A member new to the group (or
// whose totals went back: it registered again) starts its window now.
std::optional<Window> slowestWindow(GroupCompressionState& s,
                                    const std::vector<LinkSample>& members,
                                    const CompressionTuning& t) {
  std::map<std::uint64_t, GroupCompressionState::Mark> kept;
  std::optional<Window> slowest;
  bool complete = true;
  for (const auto& m : members) {
    if (m.steps < t.min_steps) continue;
    auto it = s.window.find(m.worker);
    if (it == s.window.end() || m.steps < it->second.steps) {
      kept[m.worker] = {m.steps, m.total_comm_ms};
      complete = false;
      continue;
    }
    kept[m.worker] = it->second;
    const std::uint64_t steps = m.steps - it->second.steps;
    if (steps < t.trial_steps) {
      complete = false;
      continue;
    }
    const double comm = (m.total_comm_ms - it->second.total_comm_ms) / static_cast<double>(steps);
    if (!slowest || comm > slowest->comm_ms) slowest = Window{m.worker, comm, m.bytes_per_step};
  }
  s.window = std::move(kept);  // members gone are dropped
  if (!complete || !slowest) return std::nullopt;
  return slowest;
}

// Every member's next window starts at its current totals.
void restartWindows(GroupCompressionState& s, const std::vector<LinkSample>& members) {
  s.window.clear();
  for (const auto& m : members) s.window[m.worker] = {m.steps, m.total_comm_ms};
}

}  // namespace

std::optional<std::string> stepCompression(GroupCompressionState& s,
                                           const std::vector<LinkSample>& members,
                                           const CompressionTuning& t) {
  if (s.phase == GroupCompressionState::Phase::kLatencyBound) return std::nullopt;
  auto w = slowestWindow(s, members, t);
  if (!w) return std::nullopt;
  restartWindows(s, members);
  const double mbit = linkMbit(w->bytes, w->comm_ms).value_or(1e12);  // no time: fast
  s.slowest_mbit = mbit;
  s.slowest_worker = w->worker;
  std::ostringstream why;
  using Phase = GroupCompressionState::Phase;
  switch (s.phase) {
    case Phase::kDense:
      if (mbit >= t.threshold_mbit) return std::nullopt;
      s.phase = Phase::kTrial;
      s.dense_comm_ms = w->comm_ms;
      why << "slowest link (worker " << w->worker << ") " << static_cast<int>(mbit) << " Mbit/s < "
          << static_cast<int>(t.threshold_mbit) << ": trying fp16 (round trip " << w->comm_ms
          << " ms)";
      return why.str();
    case Phase::kTrial:
      s.trial_comm_ms = w->comm_ms;
      if (w->comm_ms <= (1.0 - t.min_saving) * s.dense_comm_ms) {
        s.phase = Phase::kFp16;
        why << "fp16 kept: slowest round trip " << s.dense_comm_ms << " -> " << w->comm_ms << " ms";
      } else {
        s.phase = Phase::kLatencyBound;
        why << "back to dense for good: the slowest round trip did not shrink with fp16 ("
            << s.dense_comm_ms << " -> " << w->comm_ms << " ms), the link is latency-bound";
      }
      return why.str();
    case Phase::kFp16:
      if (mbit <= t.threshold_mbit * (1.0 + t.hysteresis)) return std::nullopt;
      s.phase = Phase::kDense;
      why << "slowest link " << static_cast<int>(mbit) << " Mbit/s: back to dense";
      return why.str();
    case Phase::kLatencyBound:
      break;
  }
  return std::nullopt;
}

}  // namespace groupsgd::adaptive::policy
