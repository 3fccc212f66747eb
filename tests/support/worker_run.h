// A daemon under test in a fresh directory with the workers a test starts against it
// (their output in DIR/worker-I.log), and the end of the run: the daemon's exit, every
// worker's, the summary. The directory goes when the run does.
// Header-only: it runs WORKER_PATH, so it is for tests built with NEEDS worker.
// Thread rule: the test's thread.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon_harness.h"

#ifndef WORKER_PATH
#error "worker_run.h runs the worker: build the test with NEEDS worker"
#endif

namespace groupsgd::testing {

struct WorkerRun {
  std::string dir = makeTempDir();
  std::unique_ptr<Process> daemon;
  std::vector<std::unique_ptr<Process>> workers;
  std::string endpoint;

  WorkerRun() = default;
  WorkerRun(const WorkerRun&) = delete;
  WorkerRun& operator=(const WorkerRun&) = delete;
  ~WorkerRun() {
    workers.clear();
    daemon.reset();
    removeTestDir(dir);
  }

  // The daemon, its output in DIR/daemon.log.
  void start(std::vector<std::string> daemon_args, const DaemonFiles& files) {
    daemon = startDaemon(dir, "daemon.log", std::move(daemon_args), files);
    endpoint = endpointIn(dir);
  }
  std::string workerLog(std::size_t i) const {
    return dir + "/worker-" + std::to_string(i) + ".log";
  }
  // WORKER --coordinator ENDPOINT EXTRA.
  Process& addWorker(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {WORKER_PATH, "--coordinator", endpoint};
    argv.insert(argv.end(), extra.begin(), extra.end());
    workers.push_back(std::make_unique<Process>(argv, workerLog(workers.size())));
    return *workers.back();
  }
  // The daemon exits 0 within `timeout`, then the first `expect_clean` workers each within
  // `worker_timeout`; returns the summary.
  nlohmann::json finish(std::chrono::milliseconds timeout,
                        std::chrono::milliseconds worker_timeout = std::chrono::seconds(15),
                        std::size_t expect_clean = ~std::size_t{0}) {
    auto rc = daemon->wait(timeout);
    REQUIRE_MESSAGE(rc.has_value(), "the daemon did not stop in time");
    CHECK(*rc == 0);
    for (std::size_t i = 0; i < workers.size() && i < expect_clean; ++i) {
      auto wrc = workers[i]->wait(worker_timeout);
      CHECK_MESSAGE(wrc == std::optional<int>(0),
                    exitText(wrc) << ", worker " << i << ": " << readFile(workerLog(i)));
    }
    return readSummary(dir);
  }
};

}  // namespace groupsgd::testing
