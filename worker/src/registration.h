// Registration with retry and back-off, shared by the trainer and the evaluator.
#pragma once

#include <atomic>

#include "groupsgd/worker/client.h"
#include "groupsgd/worker/options.h"

namespace groupsgd::worker {

// Registers, retrying with back-off (100 ms doubling to 2 s) until the connect timeout.
Result<Assignment> registerWithRetry(CoordinatorClient& coord, Role role, const WorkerOptions& o,
                                     const std::atomic<bool>& interrupted);

}  // namespace groupsgd::worker
