// Quarantine of a repeat offender: a worker whose updates were refused as bad
// (non-finite, over the norm bound, malformed) `after` times within `window` is
// quarantined until an operator clears it. Knows nothing of sockets; the clock is
// passed in, so the policy is unit-tested directly.
// Thread rule: owned by one thread (the group PS's); not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <set>
#include <unordered_map>

namespace groupsgd {

class QuarantinePolicy {
 public:
  using Clock = std::chrono::steady_clock;
  // after == 0 disables quarantine (refusals are still counted by the caller).
  QuarantinePolicy(std::uint32_t after, std::chrono::milliseconds window)
      : after_(after), window_(window) {}

  // Records one bad update; true when this one puts the worker in quarantine.
  bool recordBad(std::uint64_t worker, Clock::time_point now);
  bool isQuarantined(std::uint64_t worker) const { return quarantined_.count(worker) != 0; }
  void clear(std::uint64_t worker);
  const std::set<std::uint64_t>& quarantined() const { return quarantined_; }
  // Bad updates of this worker still inside the window (after the last recordBad).
  std::size_t recentBad(std::uint64_t worker) const;

 private:
  std::uint32_t after_;
  std::chrono::milliseconds window_;
  std::unordered_map<std::uint64_t, std::deque<Clock::time_point>> recent_;
  std::set<std::uint64_t> quarantined_;
};

}  // namespace groupsgd
