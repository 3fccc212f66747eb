// Keeps a trainer in touch with its coordinator while one request to its group PS waits
// (a barrier behind a straggler, or a PS whose node died): every kInterruptSlice the wait
// asks `beat`, which heartbeats when one is due and says whether the wait must end (the
// coordinator moved us after our group failed, declared us dead, or stops the run). A
// trainer silent for the whole request timeout would be declared dead before its node,
// and its last report would undercount what its failed group had already flushed.
// The wait also ends on `interrupted` (SIGINT/SIGTERM of groupsgd-worker).
// Thread rule: one per waiting thread, on its stack, for the scope of one request; the
// heartbeat `beat` sends runs on that thread, unwatched (no nested beat).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

#include "groupsgd/common/interrupt.h"

namespace groupsgd::worker {

class GroupWait {
 public:
  enum class End { kNone, kInterrupted, kReassigned, kStop, kQuarantined };
  GroupWait(const std::atomic<bool>& interrupted, std::function<End()> beat);
  GroupWait(const GroupWait&) = delete;
  GroupWait& operator=(const GroupWait&) = delete;
  // Why the wait was ended (kNone: it was not).
  End ended() const { return end_; }

 private:
  bool check();
  const std::atomic<bool>& interrupted_;
  std::function<End()> beat_;
  End end_ = End::kNone;
  bool in_beat_ = false;
  ScopedInterruptCheck scope_;  // last: installed once the members above exist
};

const char* groupWaitEndName(GroupWait::End e);

// The rule for a stop heard while a group request waits, shared by the reference trainer
// and groupsgd.torch: a live group PS answers within milliseconds (its answer, with the
// stop, confirms the push), so the wait ends for the stop only once the PS has stayed
// silent for a heartbeat period (at least 50 ms) after it was heard.
// Thread rule: the waiting thread's.
class StopGrace {
 public:
  using Clock = std::chrono::steady_clock;
  // The first call counts; later ones (the same stop heard again) change nothing.
  void heard(Clock::time_point now = Clock::now()) {
    if (!heard_) heard_ = now;
  }
  bool over(std::uint32_t heartbeat_ms, Clock::time_point now = Clock::now()) const {
    return heard_ &&
           now - *heard_ > std::chrono::milliseconds(std::max<std::uint32_t>(heartbeat_ms, 50));
  }

 private:
  std::optional<Clock::time_point> heard_;
};

}  // namespace groupsgd::worker
