#include "groupsgd/worker/group_wait.h"

namespace groupsgd::worker {

GroupWait::GroupWait(const std::atomic<bool>& interrupted, std::function<End()> beat)
    : interrupted_(interrupted), beat_(std::move(beat)), scope_([this] { return check(); }) {}

bool GroupWait::check() {
  // The heartbeat's own wait for its answer runs this check too: it must not beat again.
  if (in_beat_) return false;
  if (end_ != End::kNone) return true;
  if (interrupted_.load()) {
    end_ = End::kInterrupted;
    return true;
  }
  in_beat_ = true;
  end_ = beat_();
  in_beat_ = false;
  return end_ != End::kNone;
}

const char* groupWaitEndName(GroupWait::End e) {
  switch (e) {
    case GroupWait::End::kNone:
      return "none";
    case GroupWait::End::kInterrupted:
      return "interrupted";
    case GroupWait::End::kReassigned:
      return "the coordinator has a new assignment for us";
    case GroupWait::End::kStop:
      return "the coordinator stops the run";
    case GroupWait::End::kQuarantined:
      return "quarantined by the coordinator";
  }
  return "?";
}

}  // namespace groupsgd::worker
