// The pieces of the process tests that kill a head (or node) and bring it back: trainers
// that find their way back on their own, the checkpointing head's flags, a node daemon,
// a hard kill, and the end-of-run check that every worker exited 0.
// Header-only: it runs WORKER_PATH, so it is for tests built with NEEDS worker.
// Thread rule: the test's thread.
#pragma once

#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"

#ifndef WORKER_PATH
#error "head_restart.h runs the worker: build the test with NEEDS worker"
#endif

namespace groupsgd::testing {

// Workers that lose their group or head must find their way back on their own, quickly.
inline const std::vector<std::string> kRecoveringWorker = {
    "--timeout-ms", "1500", "--backoff-max-ms", "1000", "--give-up-s", "90"};

// WORKER --coordinator EP --name wI --device-ms 3 EXTRA, its output in DIR/wI.log.
inline std::unique_ptr<Process> startWorker(const std::string& dir, const std::string& ep, int i,
                                            const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {
      WORKER_PATH, "--coordinator", ep, "--name", "w" + std::to_string(i), "--device-ms", "3"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<Process>(argv, dir + "/w" + std::to_string(i) + ".log");
}

// Each of `workers` (wI, its output in DIR/wI.log) exits 0 within `timeout`; a failure
// shows the worker's log.
inline void checkWorkersExit(const std::string& dir,
                             const std::vector<std::unique_ptr<Process>>& workers,
                             std::chrono::milliseconds timeout) {
  for (std::size_t i = 0; i < workers.size(); ++i) {
    CHECK_MESSAGE(workers[i]->wait(timeout) == std::optional<int>(0),
                  "w" << i << ": " << readFile(dir + "/w" + std::to_string(i) + ".log"));
  }
}

// A head that a standby follows: role coordinator, 2 groups of a 2-trainer run, 250 ms
// heartbeats, a 500 ms takeover, 30,000 samples. The standby gets the same flags (it
// becomes this head); the caller adds replication_listen or --role standby --primary.
inline std::vector<std::string> standbyPairHeadArgs(const std::string& max_seconds) {
  return {"--progress-ms",
          "0",
          "--mode",
          "grouped",
          "--workers",
          "2",
          "--groups",
          "2",
          "--heartbeat-ms",
          "250",
          "--heartbeat-misses",
          "12",
          "--step-deadline-ms",
          "1000",
          "--role",
          "coordinator",
          "--standby-takeover-ms",
          "500",
          "--max-samples",
          "30000",
          "--max-seconds",
          max_seconds};
}

// The checkpointing head of the restart tests: grouped, `workers` workers in 2 groups,
// anyone silent for 12 heartbeats of 250 ms dead, a 1 s step deadline, a checkpoint in
// DIR/ck every `every` central versions (none by time), no progress lines.
inline std::vector<std::string> checkpointedHeadArgs(const std::string& dir, int workers = 2,
                                                     std::uint64_t every = 20) {
  return {"--progress-ms",
          "0",
          "--mode",
          "grouped",
          "--workers",
          std::to_string(workers),
          "--groups",
          "2",
          "--heartbeat-ms",
          "250",
          "--heartbeat-misses",
          "12",
          "--step-deadline-ms",
          "1000",
          "--checkpoint-dir",
          dir + "/ck",
          "--checkpoint-every-versions",
          std::to_string(every),
          "--checkpoint-interval-s",
          "0"};
}

// groupsgdd --role node --coordinator COORDINATOR (an endpoint or a list) offering 2 group
// PSes of a grouped run of 2 workers in 2 groups (a 1 s step deadline; it gives up after
// 60 s without a head), its output in DIR/node.log.
inline std::unique_ptr<Process> startNode(const std::string& dir, const std::string& coordinator) {
  return std::make_unique<Process>(
      std::vector<std::string>{groupsgddPath(), "--role", "node", "--coordinator", coordinator,
                               "--node-groups", "2", "--mode", "grouped", "--workers", "2",
                               "--groups", "2", "--step-deadline-ms", "1000", "--give-up-s", "60"},
      dir + "/node.log");
}

// SIGKILL, then the process gone within 10 s.
inline void killHard(Process& p) {
  REQUIRE(::kill(p.pid(), SIGKILL) == 0);
  REQUIRE(p.wait(std::chrono::seconds(10)).has_value());
}

// A checkpointing head (role coordinator, checkpointedHeadArgs), a node daemon offering its
// two group PSes and two recovering workers. With a spare endpoint the node and the workers
// are given the list "head's endpoint,spare" (a free loopback port for a head that moves).
struct NodeRun {
  std::vector<std::string> args;  // the head's flags
  std::unique_ptr<Process> head, node;
  std::vector<std::unique_ptr<Process>> workers;
  std::string ep;        // the head's
  std::string spare_ep;  // empty without a spare
};
inline NodeRun startNodeRun(const std::string& dir, bool spare_endpoint) {
  NodeRun r;
  r.args = withArgs(checkpointedHeadArgs(dir), {"--role", "coordinator"});
  r.head = startDaemon(dir, "head1.log", "tcp://127.0.0.1:0", r.args);
  r.ep = endpointIn(dir);
  std::string coordinator = r.ep;
  if (spare_endpoint) {
    r.spare_ep = "tcp://127.0.0.1:" + std::to_string(freePort());
    coordinator += "," + r.spare_ep;
  }
  r.node = startNode(dir, coordinator);
  for (int i = 0; i < 2; ++i)
    r.workers.push_back(startWorker(dir, coordinator, i, kRecoveringWorker));
  return r;
}

// The outage under test: the head killed hard, then, after `outage` (a fixed time, not a
// state), a new head on `listen` with `args` (its output in DIR/head2.log).
struct HeadRestart {
  std::unique_ptr<Process> head;  // the new one
  double killed_at = 0;           // wall times (wallNow)
  double restarted_at = 0;
};
inline HeadRestart restartHead(const std::string& dir, Process& old_head, const std::string& listen,
                               std::vector<std::string> args, std::chrono::milliseconds outage) {
  HeadRestart r;
  r.killed_at = wallNow();
  killHard(old_head);
  std::this_thread::sleep_for(outage);
  r.head = startDaemon(dir, "head2.log", listen, std::move(args));
  r.restarted_at = wallNow();
  return r;
}

}  // namespace groupsgd::testing
