// A check that long waits poll so a caller can cut them short (the Python binding's
// Ctrl-C): with a check installed, RpcClient waits and interruptibleSleep() wake every
// kInterruptSlice and return aborted("interrupted") once it says so. Without one, waits
// are as before (one poll for the whole timeout).
// Thread rule: the check is per thread; it is installed by, and only runs on, the thread
// that waits (the heartbeat and other threads never see it).
#pragma once

#include <chrono>
#include <functional>

#include "groupsgd/common/status.h"

namespace groupsgd {

inline constexpr std::chrono::milliseconds kInterruptSlice{50};

// Installs `check` for the calling thread for this object's lifetime (restoring the one
// before, so scopes nest).
class ScopedInterruptCheck {
 public:
  explicit ScopedInterruptCheck(std::function<bool()> check);
  ~ScopedInterruptCheck();
  ScopedInterruptCheck(const ScopedInterruptCheck&) = delete;
  ScopedInterruptCheck& operator=(const ScopedInterruptCheck&) = delete;

 private:
  std::function<bool()> previous_;
};

// True when this thread has a check installed.
bool interruptCheckInstalled();
// Runs this thread's check: true when the wait in progress must end (false without one).
bool interruptRequested();
// The Status an interrupted wait returns.
Status interruptedStatus();
bool isInterrupted(const Status& s);
// Sleeps for d, waking every kInterruptSlice to run the check; interruptedStatus() if it
// said so.
Status interruptibleSleep(std::chrono::nanoseconds d);

}  // namespace groupsgd
