// What the message and codec unit tests build their messages with: the limits of job 7
// and a ramp-valued payload. Header only; any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "groupsgd/common/message.h"
#include "groupsgd/common/payload.h"

namespace groupsgd::testing {

// Default limits, for messages of job 7.
inline MessageLimits job7Limits() {
  MessageLimits l;
  l.job_id = 7;
  return l;
}

// n values 0, 0.5, 1, ...
inline Payload rampPayload(std::size_t n) {
  auto v = std::make_shared<std::vector<float>>(n);
  for (std::size_t i = 0; i < n; ++i) (*v)[i] = static_cast<float>(i) * 0.5f;
  return v;
}

}  // namespace groupsgd::testing
