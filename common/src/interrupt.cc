#include "groupsgd/common/interrupt.h"

#include <algorithm>
#include <thread>

namespace groupsgd {
namespace {

thread_local std::function<bool()> t_check;

}  // namespace

ScopedInterruptCheck::ScopedInterruptCheck(std::function<bool()> check)
    : previous_(std::move(t_check)) {
  t_check = std::move(check);
}

ScopedInterruptCheck::~ScopedInterruptCheck() { t_check = std::move(previous_); }

bool interruptCheckInstalled() { return static_cast<bool>(t_check); }

bool interruptRequested() { return t_check && t_check(); }

Status interruptedStatus() { return aborted("interrupted"); }

bool isInterrupted(const Status& s) {
  return s.code() == Code::kAborted && s.message() == "interrupted";
}

Status interruptibleSleep(std::chrono::nanoseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (true) {
    if (interruptRequested()) return interruptedStatus();
    const auto left = until - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds::zero()) return Status::ok();
    std::this_thread::sleep_for(interruptCheckInstalled()
                                    ? std::min<std::chrono::nanoseconds>(left, kInterruptSlice)
                                    : left);
  }
}

}  // namespace groupsgd
