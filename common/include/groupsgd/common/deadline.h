// Time left until a deadline, for poll timeouts.
#pragma once

#include <chrono>

namespace groupsgd {

// Whole milliseconds left until `deadline`, at least 0. Rounded up: truncating would
// let a wait end up to 1 ms before its deadline (0 only once the deadline has passed).
inline std::chrono::milliseconds timeLeft(std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() < 0 ? std::chrono::milliseconds(0) : left;
}

}  // namespace groupsgd
