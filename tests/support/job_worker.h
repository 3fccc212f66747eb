// The multi-job daemon's tests' pieces: a job of the softmax model, and a worker of a job.
// Header-only: it runs WORKER_PATH, so it is for tests built with NEEDS worker.
// Thread rule: the test's thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "process.h"

#ifndef WORKER_PATH
#error "job_worker.h runs the worker: build the test with NEEDS worker"
#endif

namespace groupsgd::testing {

// A job of the multi-job daemon: NAME training the softmax model with 2 workers (batch 64,
// lr 0.1) in MODE (grouped: 2 groups) for at most MAX_SECONDS, and to TARGET test accuracy
// when TARGET > 0.
inline nlohmann::json softmaxJob(const std::string& name, const std::string& mode, double target,
                                 int max_seconds) {
  nlohmann::json j = {{"name", name},
                      {"mode", mode},
                      {"workers", 2},
                      {"model", "softmax"},
                      {"batch_size", 64},
                      {"optimizer", {{"lr", 0.1}}},
                      {"max_seconds", max_seconds}};
  if (mode == "grouped") j["groups"] = 2;
  if (target > 0) j["target_acc"] = target;
  return j;
}

// WORKER --coordinator EP [--job JOB] --name NAME: 2 ms steps, a 4 s request timeout, giving
// up after 60 s; with `evaluate` an evaluator every 200 ms. Its output in DIR/NAME.log.
inline std::unique_ptr<Process> startJobWorker(const std::string& dir, const std::string& ep,
                                               const std::string& job, const std::string& name,
                                               bool evaluate) {
  std::vector<std::string> argv = {WORKER_PATH, "--coordinator", ep,    "--name",
                                   name,        "--device-ms",   "2",   "--give-up-s",
                                   "60",        "--timeout-ms",  "4000"};
  if (!job.empty()) argv.insert(argv.end(), {"--job", job});
  if (evaluate) argv.insert(argv.end(), {"--evaluate", "--eval-interval-ms", "200"});
  return std::make_unique<Process>(argv, dir + "/" + name + ".log");
}

}  // namespace groupsgd::testing
