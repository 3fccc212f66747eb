// When a synchronous step may close without its last members ("backup workers"): once all
// but `max_late` members have pushed, the step waits at most a measured time for the rest.
// The measure is the group's own: the time from a step's release to its quorum (the
// (n - max_late)-th push), over the last `window` steps; the step closes at its release +
// max(factor x median, median + 4 x MAD). A member's pause then costs the group a fraction
// of a step instead of the pause; its late gradient is dropped (and counted) by the caller.
// Knows nothing about sockets; time is passed in, so the rule is unit-tested directly.
// Thread rule: owned by the group PS thread; not thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace groupsgd::groupps {

struct StepCutoffConfig {
  double factor = 0;            // 0: off (steps wait for every member, up to the deadline)
  double late_fraction = 0.25;  // at most floor(members x this) members may be left behind
  std::size_t window = 32;      // quorum times kept
  std::size_t min_samples = 8;  // quorum times needed before the cutoff acts
};

class StepCutoff {
 public:
  using Clock = std::chrono::steady_clock;

  // Keeps the quorum times measured so far (reset() forgets them).
  void configure(const StepCutoffConfig& cfg);
  // The group's members: when they change, earlier times describe another group and are
  // forgotten. New batches of the same members keep them: the median follows a change
  // within half a window (16 steps), and re-batching every control window would
  // otherwise leave the first 8 steps of each window without a cutoff.
  void setMembers(std::vector<std::uint64_t> ids);
  void reset();

  // How many of `members` may be missing when the cutoff closes a step (0: no cutoff).
  std::size_t maxLate(std::size_t members) const;
  // The step opened for pushes at `released` (the previous step's close).
  void stepReleased(Clock::time_point released);
  // A push arrived at `now`, making `arrivals` of `members`: records the quorum time the
  // first time the quorum is reached in this step.
  void pushArrived(std::size_t arrivals, std::size_t members, Clock::time_point now);
  // When the open step may close without its missing members: set once the quorum is in
  // and enough quorum times are known.
  std::optional<Clock::time_point> deadline() const;
  // The wait after the release that the cutoff allows now (for logs and tests).
  std::optional<std::chrono::microseconds> allowance() const;

 private:
  StepCutoffConfig cfg_;
  std::vector<std::uint64_t> members_;  // sorted
  std::deque<std::chrono::microseconds> quorum_times_;
  std::optional<Clock::time_point> released_;
  bool quorum_in_ = false;
};

}  // namespace groupsgd::groupps
