// Fault test (label `faults`): the head (role coordinator: coordinator +
// central PS) killed with SIGKILL and restarted from its checkpoint on ANOTHER
// port. The node daemon and the workers were given both endpoints
// (--coordinator A,B); they find the new head on their own, and the restarted
// run's accounting holds.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "daemon_harness.h"
#include "head_restart.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

TEST_CASE(
    "faults: the head restarted on another port is found again by the "
    "node daemon and the workers (endpoint list); accounting holds") {
  const std::string dir = makeTempDir();
  NodeRun run = startNodeRun(dir, /*spare_endpoint=*/true);
  const std::string& ep1 = run.ep;
  const std::string& ep2 = run.spare_ep;
  json st = waitForStatus(
      dir,
      [](const json& s) {
        return s["central_version"].get<std::uint64_t>() >= 40;  // two checkpoints at least
      },
      90000ms);
  REQUIRE(st["central_version"].get<std::uint64_t>() >= 40);
  const auto seen = st["central_version"].get<std::uint64_t>();
  // A budget of several seconds of training: with 4000 the new head finished 0.8 s after
  // the first trainer was back, before the second one's next retry (back-off up to 1 s).
  const HeadRestart restart =
      restartHead(dir, *run.head, ep2,
                  withArgs(run.args, {"--max-samples", "40000", "--max-seconds", "120"}), 1000ms);
  const auto& again = restart.head;
  const double killed_at = restart.killed_at, restarted_at = restart.restarted_at;
  // Everybody back on the new endpoint, training under the new incarnation.
  st = waitForStatus(
      dir,
      [](const json& s) {
        return s["workers"]["active"] == 2 && s["samples_trained"].get<std::uint64_t>() > 0;
      },
      60000ms);
  const double back_at = wallNow() - killed_at;
  INFO("head2: " << readFile(dir + "/head2.log"));
  INFO("node: " << readFile(dir + "/node.log"));
  CHECK(st["workers"]["active"] == 2);
  CHECK(st["incarnation"] == 2);
  REQUIRE(again->wait(150000ms) == std::optional<int>(0));
  CHECK(run.node->wait(30000ms) == std::optional<int>(0));
  checkWorkersExit(dir, run.workers, 30000ms);
  CHECK(readFile(dir + "/node.log").find("re-registering") != std::string::npos);
  json s = readSummary(dir);
  checkAccounting(s);
  CHECK(s["stop_reason"] == "sample budget spent");
  const json& hr = s["head_restart"];
  CHECK(hr["incarnation"] == 2);
  const auto resumed = hr["resumed_version"].get<std::uint64_t>();
  CHECK(resumed > 0);
  CHECK(seen <= resumed + 2 * 20);  // the checkpoint policy's bound (+ one write's slack)
  CHECK(s["group_stats"].size() == 2);
  std::printf(
      "faults: head SIGKILL, restarted %.2f s later on another port "
      "(%s -> %s): node "
      "and both workers training on the new head %.2f s after the kill "
      "(%.2f s after "
      "the restart); resumed version %llu (test saw >= %llu); %llu "
      "samples after the "
      "restart, accounting ok %d\n",
      restarted_at - killed_at, ep1.c_str(), ep2.c_str(), back_at,
      back_at - (restarted_at - killed_at), static_cast<unsigned long long>(resumed),
      static_cast<unsigned long long>(seen), llu(s["samples_trained"]),
      s["accounting_ok"].get<bool>() ? 1 : 0);
  reportDone(dir);
}

// A trainer whose back-off makes it miss the whole run of the restarted head: before
// finish_linger_s it found no head at its next retry and kept registering until its
// --give-up-s (the multi-node failover test's worker that did not exit within 30 s).
TEST_CASE(
    "faults: a trainer still in its back-off when the restarted head's run ends is "
    "told `finished` and exits 0") {
  const std::string dir = makeTempDir();
  const std::vector<std::string> args = checkpointedHeadArgs(dir);
  auto head = startDaemon(dir, "head1.log", "tcp://127.0.0.1:0", args);
  const std::string ep = endpointIn(dir);
  auto worker = [&](int i, const std::vector<std::string>& backoff) {
    return startWorker(dir, ep, i,
                       withArgs({"--timeout-ms", "1500", "--give-up-s", "60"}, backoff));
  };
  auto w0 = worker(0, {"--backoff-max-ms", "1000"});
  // w1 waits 16-20 s between registration attempts (20 s, less up to 20% jitter); at debug
  // level it logs each failed attempt ("retrying in").
  auto w1 = worker(
      1, {"--backoff-initial-ms", "20000", "--backoff-max-ms", "20000", "--log-level", "debug"});
  json st = waitForStatus(
      dir, [](const json& s) { return s["central_version"].get<std::uint64_t>() >= 20; }, 90000ms);
  REQUIRE(st["central_version"].get<std::uint64_t>() >= 20);
  killHard(*head);
  // w1's first attempt goes out 1.5 s after this line (its Leave times out first) and
  // fails 1.5 s later; the next one comes 16-20 s after that. The new head starts in
  // between (once that first attempt failed) and spends its budget with w0 alone.
  REQUIRE(waitUntil(
      [&] {
        const std::string log = readFile(dir + "/w1.log");
        const auto again = log.find("registering again");
        return again != std::string::npos && log.find("retrying in", again) != std::string::npos;
      },
      30000ms));
  auto again = startDaemon(dir, "head2.log", ep,
                           withArgs(args, {"--max-samples", "2000", "--max-seconds", "60"}));
  REQUIRE(again->wait(60000ms) == std::optional<int>(0));
  const std::string head2 = readFile(dir + "/head2.log");
  INFO("head2: " << head2);
  INFO("w1: " << readFile(dir + "/w1.log"));
  CHECK(w0->wait(20000ms) == std::optional<int>(0));
  // It heard `finished` from the lingering head; without it, it retried for 60 s.
  CHECK(w1->wait(20000ms) == std::optional<int>(0));
  CHECK(readFile(dir + "/w1.log").find("the run is over") != std::string::npos);
  CHECK(head2.find("telling late ones `finished`") != std::string::npos);
  CHECK(head2.find("stopped lingering: 2 of 2") != std::string::npos);
  json s = readSummary(dir);
  checkAccounting(s);
  CHECK(s["stop_reason"] == "sample budget spent");
  CHECK(s["head_restart"]["incarnation"] == 2);
  removeTestDir(dir);
}
