// Reconnect back-off: exponential growth from `initial` to `max`, each delay shortened
// by a random fraction up to `jitter` so that many clients losing the same head do not
// retry in lock-step (the zguide / gRPC connection-backoff rule).
// Thread rule: plain value types; a Backoff object belongs to one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

namespace groupsgd {

struct BackoffPolicy {
  std::chrono::milliseconds initial{100};
  std::chrono::milliseconds max{2000};
  double jitter = 0.2;  // 0 = none; 0.2 = each delay is 80..100% of the nominal one
};

// The delay before retry number `attempt` (0-based): min(initial * 2^attempt, max),
// reduced by jitter * unit_random (unit_random in [0, 1)). Pure, for the tests.
std::chrono::milliseconds backoffDelay(const BackoffPolicy& p, std::uint32_t attempt,
                                       double unit_random);

// The same schedule with its own attempt counter and random source.
class Backoff {
 public:
  explicit Backoff(BackoffPolicy p, std::uint64_t seed = std::random_device{}());
  std::chrono::milliseconds next();  // the next delay; advances the counter
  void reset() { attempt_ = 0; }
  std::uint32_t attempts() const { return attempt_; }

 private:
  BackoffPolicy policy_;
  std::uint32_t attempt_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace groupsgd
