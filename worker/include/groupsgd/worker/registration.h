// Registration with retry and back-off, shared by the trainer, the evaluator and the Python
// binding. Thread rule: stateless; registerWithRetry runs on the thread that owns coord.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

#include "groupsgd/client/client.h"
#include "groupsgd/common/backoff.h"
#include "groupsgd/worker/options.h"

namespace groupsgd::worker {

// The worker's back-off policy (--backoff-initial-ms doubling to --backoff-max-ms, 20%
// jitter).
BackoffPolicy backoffPolicy(const WorkerOptions& o);

// Registers as a new worker, retrying with back-off while the coordinator is unreachable
// or not ready, for at most `patience` (the connect timeout at start-up, --give-up-s
// after losing the head); no single request waits past that deadline. Refusals (wrong
// job, quarantined, a CURVE key the daemon does not allow) are returned at once.
Result<client::Assignment> registerWithRetry(client::CoordinatorClient& coord, client::Role role,
                                             const WorkerOptions& o,
                                             const std::atomic<bool>& interrupted,
                                             std::chrono::milliseconds patience);

// A trainer's answer to a step's directive (the trainer's and the Python binding's): the
// batch size it names (not 0) goes to *batch; stop sets *stop; reassign calls
// reregister(), which says whether the trainer goes on, and sets *stop when it does not.
// True only for continue: training goes on with this answer.
bool followDirective(const client::StepAnswer& ans, std::uint32_t* batch, bool* stop,
                     const std::function<bool()>& reregister);

}  // namespace groupsgd::worker
