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

#include <atomic>
#include <functional>

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

}  // namespace groupsgd::worker
