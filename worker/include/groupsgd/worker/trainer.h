// The reference training loop (groupsgd-worker) and the evaluator loop, as functions of
// their options so tests and the binary share them. Both return the process exit code:
// 0 after a clean stop, 1 on a runtime failure, 2 on bad options or data.
// Thread rule: each runs on the calling thread and owns its sockets.
#pragma once

#include <atomic>

#include <zmq.hpp>

#include "groupsgd/worker/options.h"

namespace groupsgd::worker {

int runTrainer(zmq::context_t& ctx, const WorkerOptions& opts,
               const std::atomic<bool>& interrupted);
int runEvaluator(zmq::context_t& ctx, const WorkerOptions& opts,
                 const std::atomic<bool>& interrupted);

}  // namespace groupsgd::worker
