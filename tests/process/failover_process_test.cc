// Failover on real processes (docs/reliability.md, "Fault runs"): the head killed with
// SIGKILL and restarted from its checkpoint, a node daemon hosting a group PS killed with
// SIGKILL, and a worker sending NaN updates until it is quarantined. Each prints the
// figures docs/reliability.md quotes ("failover: ..." lines; ctest -V shows them).
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "daemon_harness.h"
#include "head_restart.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

std::uint64_t samplesNow(const std::string& dir) {
  json s = ctl(dir, {"status"});
  return s.is_null() ? 0 : s["samples_trained"].get<std::uint64_t>();
}

bool waitForSamples(const std::string& dir, std::uint64_t samples,
                    std::chrono::milliseconds timeout) {
  return waitUntil([&] { return samplesNow(dir) > samples; }, timeout, 200ms);
}

// A head (role coordinator, 2 groups; nodes and workers dead after max(250 ms * 12,
// 1000 + 2 * 250) = 3 s of silence), node a hosting group 0, node b offering
// node_b_groups group PSes (group 1, then spares), and four recovering workers, trained
// past 3000 samples with all four placed.
struct TwoNodeRun {
  std::string ep;
  std::unique_ptr<Process> head, node_a, node_b;
  std::vector<std::unique_ptr<Process>> workers;
};

TwoNodeRun startTwoNodeRun(const std::string& dir, const std::string& node_b_groups,
                           const std::vector<std::string>& worker_args = kRecoveringWorker) {
  TwoNodeRun r;
  r.head = startDaemon(dir, "head.log", "tcp://127.0.0.1:0",
                       {"--progress-ms", "0", "--role", "coordinator", "--mode", "grouped",
                        "--workers", "4", "--groups", "2", "--heartbeat-ms", "250",
                        "--heartbeat-misses", "12", "--step-deadline-ms", "1000"});
  r.ep = endpointIn(dir);
  auto node = [&](const std::string& name, const std::string& groups) {
    return std::make_unique<Process>(
        std::vector<std::string>{GROUPSGDD_PATH, "--role", "node", "--coordinator", r.ep,
                                 "--node-groups", groups, "--mode", "grouped", "--workers", "4",
                                 "--groups", "2", "--step-deadline-ms", "1000"},
        dir + "/" + name + ".log");
  };
  // Group ids go in the order the nodes offer.
  r.node_a = node("node-a", "1");
  REQUIRE(waitForText(dir + "/head.log", "1 of 2 groups ready", 20000ms));
  r.node_b = node("node-b", node_b_groups);
  REQUIRE(waitForText(dir + "/head.log", "2 of 2 groups ready", 20000ms));
  for (int i = 0; i < 4; ++i) r.workers.push_back(startWorker(dir, r.ep, i, worker_args));
  REQUIRE(waitForSamples(dir, 3000, 90000ms));
  // On a loaded machine one worker may still be loading its data when the others have
  // trained 3000 samples: wait until all four are placed (two per group).
  const bool placed = waitUntil(
      [&] {
        json st = ctl(dir, {"status"});
        return !st.is_null() && st["workers"]["active"] == 4;
      },
      60000ms, 100ms);
  REQUIRE_MESSAGE(placed, readFile(dir + "/head.log"));
  return r;
}

// Trained again: once the total grew by another 2000 samples from now, the seconds since
// `killed_at`.
double trainedAgainAfter(const std::string& dir, double killed_at) {
  const std::uint64_t after_move = samplesNow(dir);
  REQUIRE(waitForSamples(dir, after_move + 2000, 60000ms));
  return wallNow() - killed_at;
}

// The numbers (I of wI) of the trainers the `workers` rows place in `group`.
std::vector<int> trainersIn(const json& rows, int group) {
  std::vector<int> ids;
  for (const auto& w : rows["workers"]) {
    if (w["role"] == "trainer" && w["group"] == group)
      ids.push_back(std::stoi(w["name"].get<std::string>().substr(1)));
  }
  return ids;
}

// The sizes of the logs of these workers (DIR/wI.log) now.
std::vector<std::size_t> logSizes(const std::string& dir, const std::vector<int>& ids) {
  std::vector<std::size_t> sizes;
  for (int i : ids) sizes.push_back(readFile(dir + "/w" + std::to_string(i) + ".log").size());
  return sizes;
}

// Node b SIGKILLed under a TwoNodeRun: group 1's trainers and where their logs and the
// head's stood at the kill. Returns once the head has declared group 1 failed.
struct NodeBLoss {
  std::vector<int> in_group1;
  std::vector<std::size_t> log_at_kill;  // per trainer in in_group1
  std::size_t head_log_at_kill = 0;
  double killed_at = 0;
  double detected = 0;  // seconds from the kill to the group_failure event
};

NodeBLoss killNodeB(const std::string& dir, TwoNodeRun& run) {
  NodeBLoss loss;
  json before = ctl(dir, {"workers"});
  REQUIRE(before.is_object());
  loss.in_group1 = trainersIn(before, 1);
  REQUIRE(loss.in_group1.size() == 2);
  loss.log_at_kill = logSizes(dir, loss.in_group1);
  loss.head_log_at_kill = readFile(dir + "/head.log").size();
  loss.killed_at = wallNow();
  REQUIRE(::kill(run.node_b->pid(), SIGKILL) == 0);
  REQUIRE(waitForText(dir + "/head.log", "group_failure: group 1 failed", 30000ms));
  loss.detected =
      stampOf(readFile(dir + "/head.log"), "group_failure", loss.head_log_at_kill) - loss.killed_at;
  return loss;
}

// Seconds from the kill until the last of group 1's trainers logged its move to group 0
// (each must within `timeout`).
double movedToGroup0(const std::string& dir, const NodeBLoss& loss,
                     std::chrono::milliseconds timeout) {
  double moved = 0;
  for (std::size_t k = 0; k < loss.in_group1.size(); ++k) {
    const std::string wlog = dir + "/w" + std::to_string(loss.in_group1[k]) + ".log";
    const auto at = [&] {
      return stampOf(readFile(wlog), "assigned: group 0", loss.log_at_kill[k]);
    };
    waitUntil([&] { return at() >= 0; }, timeout);
    INFO("w" << loss.in_group1[k] << ": " << readFile(wlog));
    REQUIRE(at() > 0);
    moved = std::max(moved, at() - loss.killed_at);
  }
  return moved;
}

// After the head has exited: node a and the four workers exit 0, the summary keeps its
// accounting and records one failed group, group 1 (node b's). Returns that summary.
json summaryAfterNodeBLost(const std::string& dir, TwoNodeRun& run) {
  CHECK(run.node_a->wait(20000ms) == std::optional<int>(0));
  checkWorkersExit(dir, run.workers, 20000ms);
  json s = readSummary(dir);
  INFO("head: " << readFile(dir + "/head.log"));
  checkAccounting(s);
  REQUIRE(s["node_failures"].size() == 1);
  CHECK(s["node_failures"][0]["group"] == 1);
  return s;
}

}  // namespace

TEST_CASE(
    "failover: the head killed with SIGKILL and restarted resumes from its checkpoint; workers "
    "re-register on their own") {
  constexpr std::uint64_t kEvery = 20;  // checkpoint every 20 central versions
  const std::string dir = makeTempDir();
  const std::vector<std::string> args =
      withArgs(checkpointedHeadArgs(dir, 4, kEvery), {"--exchange-period", "4"});
  auto head = startDaemon(dir, "head1.log", "tcp://127.0.0.1:0", args);
  const std::string ep = endpointIn(dir);
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 4; ++i) workers.push_back(startWorker(dir, ep, i, kRecoveringWorker));
  REQUIRE(waitForSamples(dir, 4000, 90000ms));
  // Wait until a few checkpoints exist; the last version seen is a lower bound of the
  // version at the kill that follows at once.
  std::uint64_t seen = 0;
  waitUntil(
      [&] {
        json st = ctl(dir, {"status"});
        if (!st.is_null()) seen = st["central_version"].get<std::uint64_t>();
        return seen >= 3 * kEvery;
      },
      60000ms, 200ms);
  REQUIRE(seen >= 3 * kEvery);
  // The workers notice (no answer), then keep trying with back-off. Restart on the same
  // port a little later, as a supervisor would. The new run's budget lasts longer than a
  // worker's longest back-off (1 s), so every worker is back before it ends.
  const HeadRestart restart = restartHead(
      dir, *head, ep, withArgs(args, {"--max-samples", "20000", "--max-seconds", "120"}), 1500ms);
  const auto& again = restart.head;
  const double killed_at = restart.killed_at, restarted_at = restart.restarted_at;
  REQUIRE(waitForText(dir + "/head2.log", "resumed from", 10000ms));
  REQUIRE(again->wait(150000ms) == std::optional<int>(0));
  checkWorkersExit(dir, workers, 30000ms);
  json s = readSummary(dir);
  INFO("head2: " << readFile(dir + "/head2.log"));
  INFO("w0: " << readFile(dir + "/w0.log"));
  checkAccounting(s);
  CHECK(s["stop_reason"] == "sample budget spent");
  const json& hr = s["head_restart"];
  REQUIRE(hr.is_object());
  CHECK(hr["incarnation"] == 2);
  const auto resumed = hr["resumed_version"].get<std::uint64_t>();
  CHECK(resumed > 0);
  // The loss is bounded by the checkpoint interval (plus versions applied while the
  // newest checkpoint was being written: one more interval of slack); both the test's
  // last look and the head's own record are lower bounds of the version at the kill.
  const std::uint64_t lost_seen = seen > resumed ? seen - resumed : 0;
  CHECK(lost_seen <= 2 * kEvery);
  const auto lost = hr["versions_lost_at_least"].get<std::uint64_t>();
  CHECK(lost <= 2 * kEvery);
  CHECK(hr["versions_lost_bound"] == kEvery);
  REQUIRE(hr["time_to_reregister_s"].is_number());
  const double rereg = hr["time_to_reregister_s"].get<double>();
  CHECK(rereg < 30.0);
  CHECK(s["central_version"].get<std::uint64_t>() > resumed);
  std::size_t moved_on = 0;
  for (int i = 0; i < 4; ++i) {
    moved_on += readFile(dir + "/w" + std::to_string(i) + ".log").find("registering again") !=
                std::string::npos;
  }
  CHECK(moved_on == 4);
  std::printf(
      "failover: head SIGKILL at version >= %llu (head recorded %llu), restarted %.2f s "
      "later; resumed checkpoint version %llu (every %llu versions): at least %llu "
      "version(s) lost by the test's look, %llu by the head's record; all 4 workers "
      "re-registered %.2f s after the restart began (%.2f s after the kill); new run "
      "trained %llu samples, central version %llu\n",
      static_cast<unsigned long long>(seen), llu(hr["previous_version_seen"]),
      restarted_at - killed_at, static_cast<unsigned long long>(resumed),
      static_cast<unsigned long long>(kEvery), static_cast<unsigned long long>(lost_seen),
      static_cast<unsigned long long>(lost), rereg, restarted_at - killed_at + rereg,
      llu(s["samples_trained"]), llu(s["central_version"]));
  reportDone(dir);
}

TEST_CASE(
    "failover: a node daemon killed with SIGKILL: its group fails, its workers are reassigned and "
    "train on; accounting holds") {
  const std::string dir = makeTempDir();
  constexpr double kDeadAfterS = 3.0;  // startTwoNodeRun's heartbeat limit
  // Node a hosts group 0, node b group 1.
  TwoNodeRun run = startTwoNodeRun(dir, "1");
  auto& head = run.head;
  const NodeBLoss loss = killNodeB(dir, run);
  const double detected = loss.detected, killed_at = loss.killed_at;
  // Each moved worker learns its new group from its next heartbeat (its old epoch).
  const double reassigned = movedToGroup0(dir, loss, 30000ms);
  const double training_again = trainedAgainAfter(dir, killed_at);
  json st = ctl(dir, {"status"});
  CHECK(st["failed_groups"] == json::array({1}));
  CHECK(st["workers"]["active"] == 4);
  json groups = ctl(dir, {"groups"});
  CHECK(groups["groups"][0]["members"] == 4);
  CHECK(groups["groups"][1]["failed"] == true);
  ::kill(head->pid(), SIGTERM);
  REQUIRE(head->wait(90000ms) == std::optional<int>(0));
  json s = summaryAfterNodeBLost(dir, run);
  INFO("head: " << readFile(dir + "/head.log"));
  const json& f = s["node_failures"][0];
  CHECK(f["reassigned"].size() == 2);
  const auto lost = s["samples_lost_in_failed_groups"].get<std::uint64_t>();
  CHECK(lost <= f["samples_lost_bound"].get<std::uint64_t>());
  // Silence counts from the node's last heartbeat (up to 250 ms before the kill).
  CHECK(detected >= kDeadAfterS - 1.0);  // never declared early (slack for a late last beat)
  CHECK(detected < kDeadAfterS + 3.0);
  CHECK(reassigned < detected + 1.5 + 6.0);  // + a worker request deadline and a retry
  std::printf(
      "failover: node SIGKILL: group 1 declared failed %.2f s later (limit %.1f s); "
      "its 2 workers reassigned to group 0 by %.2f s; +2000 samples trained by "
      "%.2f s; lost with the group: %llu samples (bound %llu); summary trained %llu "
      "applied %llu dropped %llu\n",
      detected, kDeadAfterS, reassigned, training_again, static_cast<unsigned long long>(lost),
      llu(f["samples_lost_bound"]), llu(s["samples_trained"]), llu(s["samples_applied"]),
      llu(s["samples_dropped"]));
  reportDone(dir);
}

// Trainers whose group PS dies wait on a request with a deadline far beyond the liveness
// limit (30 s against 3 s). They heartbeat while they wait, so they are not declared dead
// before their node is; they leave the wait as soon as the coordinator has moved them
// (not when the deadline expires), and a run stopped soon after keeps its accounting (a
// trainer taken for dead was credited with its last report only, less than its failed
// group had already flushed).
TEST_CASE(
    "failover: trainers waiting on a dead node's group PS keep heartbeating; they are moved "
    "when the group fails, long before their request deadline; accounting holds") {
  const std::string dir = makeTempDir();
  TwoNodeRun run = startTwoNodeRun(dir, "1", {"--timeout-ms", "30000", "--backoff-max-ms", "1000"});
  const NodeBLoss loss = killNodeB(dir, run);
  const double detected = loss.detected;
  const std::size_t head_log_at_kill = loss.head_log_at_kill;
  const double reassigned = movedToGroup0(dir, loss, 20000ms);
  for (std::size_t k = 0; k < loss.in_group1.size(); ++k) {
    const std::string wlog = dir + "/w" + std::to_string(loss.in_group1[k]) + ".log";
    INFO(readFile(wlog));
    CHECK(readFile(wlog).find("left the wait for group 1", loss.log_at_kill[k]) !=
          std::string::npos);
  }
  // Stopped well before the 30 s deadline of the pushes the kill cut off.
  ::kill(run.head->pid(), SIGTERM);
  REQUIRE(run.head->wait(60000ms) == std::optional<int>(0));
  const std::string head_log = readFile(dir + "/head.log");
  INFO("head: " << head_log);
  // The node was taken for dead; no trainer was.
  CHECK(head_log.find("group 1 failed (node", head_log_at_kill) != std::string::npos);
  std::istringstream lines(head_log.substr(head_log_at_kill));
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    CHECK_FALSE((line.find("trainer") != std::string::npos &&
                 line.find("missed its heartbeats") != std::string::npos));
  }
  json s = summaryAfterNodeBLost(dir, run);
  for (const auto& w : s["worker_stats"]) CHECK(w["state"] == "left");
  CHECK(reassigned < detected + 3.0);
  std::printf(
      "failover: node SIGKILL, trainers on a 30 s request deadline: group 1 declared failed "
      "%.2f s later; its 2 trainers moved by %.2f s; none declared dead; lost %llu samples "
      "(bound %llu)\n",
      detected, reassigned, llu(s["samples_lost_in_failed_groups"]),
      llu(s["node_failures"][0]["samples_lost_bound"]));
  reportDone(dir);
}

// A node lost while the run stops (its trainers hearing "stop", the groups about to flush)
// cannot flush its group: the head fails that group at once, counts what it held as lost
// within its members' bound, and ends without waiting for a flush call to time out (15 s).
TEST_CASE(
    "failover: a node daemon killed as the run stops: its group fails at the flush; accounting "
    "holds; no flush timeout") {
  const std::string dir = makeTempDir();
  TwoNodeRun run = startTwoNodeRun(dir, "1");
  REQUIRE(::kill(run.node_b->pid(), SIGKILL) == 0);
  const double stop_at = wallNow();
  ::kill(run.head->pid(), SIGTERM);  // before the 3 s liveness limit can name node b
  REQUIRE(run.head->wait(60000ms) == std::optional<int>(0));
  const double took = wallNow() - stop_at;
  json s = summaryAfterNodeBLost(dir, run);
  INFO("head: " << readFile(dir + "/head.log"));
  const json& f = s["node_failures"][0];
  CHECK(f["at_stop"] == true);
  CHECK(f["why"].get<std::string>().find("while the run stopped") != std::string::npos);
  CHECK(s["samples_lost_in_failed_groups"].get<std::uint64_t>() <=
        f["samples_lost_bound"].get<std::uint64_t>());
  // The trainers hear "stop" at once (they heartbeat while they wait on the dead PS); the
  // head then waits for every node to be heard from since the stop, so the dead node is
  // named at the liveness limit (3 s), and a configuration already on its way to the dead
  // PS ends at its 5 s deadline: well under the 15 s a flush call would have waited.
  CHECK(took < 12.0);
  std::printf(
      "failover: node SIGKILL as the run stops: head done %.2f s after the stop; "
      "group 1 failed at the flush; lost %llu samples (bound %llu)\n",
      took, llu(s["samples_lost_in_failed_groups"]), llu(f["samples_lost_bound"]));
  reportDone(dir);
}

TEST_CASE(
    "failover: a worker that keeps sending NaN updates is quarantined while the others train on; "
    "an operator clears it") {
  const std::string dir = makeTempDir();
  auto daemon = startDaemon(
      dir, "daemon.log", "tcp://127.0.0.1:0",
      {"--progress-ms", "0", "--mode", "grouped", "--workers", "3", "--groups", "1",
       "--heartbeat-ms", "300", "--quarantine-after", "3", "--quarantine-window-s", "30"});
  const std::string ep = endpointIn(dir);
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 2; ++i) workers.push_back(startWorker(dir, ep, i, {}));
  REQUIRE(waitForSamples(dir, 1000, 90000ms));
  const double started = wallNow();
  Process probe({PROBE_PATH, ep, "quarantine"}, dir + "/probe.log");
  const auto rc = probe.wait(60000ms);
  const std::string report = readFile(dir + "/probe.log");
  INFO("probe: " << report);
  INFO("daemon: " << readFile(dir + "/daemon.log"));
  CHECK(rc == std::optional<int>(0));
  CHECK(report.find("quarantine-push") != std::string::npos);
  CHECK(report.find("NOT REFUSED") == std::string::npos);
  CHECK(report.find("after 3 NaN pushes") != std::string::npos);
  const double quarantined_after = stampOf(readFile(dir + "/daemon.log"), "quarantine:") - started;
  json rows = ctl(dir, {"workers"});
  std::string state;
  for (const auto& w : rows["workers"]) {
    if (w["name"] == "probe") state = w["state"];
  }
  CHECK(state == "quarantined");
  CHECK(ctl(dir, {"status"})["workers"]["quarantined"] == 1);
  // The others train on.
  REQUIRE(waitForSamples(dir, samplesNow(dir) + 1000, 30000ms));
  // The operator clears it: the worker is "left" and may register again.
  json cleared = ctl(dir, {"unquarantine", "probe"});
  REQUIRE(cleared.is_object());
  CHECK(cleared["state"] == "left");
  CHECK(ctl(dir, {"status"})["workers"]["quarantined"] == 0);
  ::kill(daemon->pid(), SIGTERM);
  REQUIRE(daemon->wait(90000ms) == std::optional<int>(0));
  for (auto& w : workers) CHECK(w->wait(20000ms) == std::optional<int>(0));
  json s = readSummary(dir);
  checkAccounting(s);
  CHECK(s["quarantined"] == 1);
  CHECK(s["quarantine_refusals"].get<std::uint64_t>() >= 2);
  bool event = false;
  for (const auto& e : s["events"]) event |= e["kind"] == "quarantine";
  CHECK(event);
  std::printf(
      "failover: NaN sender quarantined after 3 refused pushes; coordinator marked it "
      "%.2f s after the probe started; refusals since: %llu; the other workers trained "
      "%llu samples in all\n",
      quarantined_after, llu(s["quarantine_refusals"]), llu(s["samples_trained"]));
  reportDone(dir);
}

TEST_CASE(
    "failover: multi-node roles: the head restarted from its checkpoint; the node daemon and the "
    "workers re-register on their own") {
  const std::string dir = makeTempDir();
  NodeRun run = startNodeRun(dir, /*spare_endpoint=*/false);
  auto& node = run.node;
  REQUIRE(waitForSamples(dir, 2000, 90000ms));
  const auto again =
      restartHead(dir, *run.head, run.ep,
                  withArgs(run.args, {"--max-samples", "3000", "--max-seconds", "120"}), 1000ms)
          .head;
  REQUIRE(again->wait(150000ms) == std::optional<int>(0));
  INFO("head2: " << readFile(dir + "/head2.log"));
  INFO("node: " << readFile(dir + "/node.log"));
  CHECK(node->wait(30000ms) == std::optional<int>(0));
  checkWorkersExit(dir, run.workers, 30000ms);
  CHECK(readFile(dir + "/node.log").find("re-registering") != std::string::npos);
  json s = readSummary(dir);
  checkAccounting(s);
  CHECK(s["stop_reason"] == "sample budget spent");
  CHECK(s["head_restart"]["incarnation"] == 2);
  CHECK(s["group_stats"].size() == 2);
  std::printf(
      "failover: multi-node head SIGKILL + restart: node re-registered, %llu samples "
      "trained after the restart, all re-registered %.2f s after the head started\n",
      llu(s["samples_trained"]),
      s["head_restart"]["time_to_reregister_s"].is_number()
          ? s["head_restart"]["time_to_reregister_s"].get<double>()
          : -1.0);
  reportDone(dir);
}

TEST_CASE(
    "failover: a node daemon killed with SIGKILL: its group is re-created on the surviving node "
    "with a free slot; its workers move back into it; accounting holds") {
  const std::string dir = makeTempDir();
  // Node a hosts group 0; node b offers two group PSes: group 1 and a spare.
  TwoNodeRun run = startTwoNodeRun(dir, "2");
  auto& head = run.head;
  auto& node_a = run.node_a;
  auto& node_b = run.node_b;
  auto& workers = run.workers;
  json before = ctl(dir, {"groups"});
  REQUIRE(before.is_object());
  const std::string old_endpoint = before["groups"][0]["endpoint"].get<std::string>();
  const std::vector<int> in_group0 = trainersIn(ctl(dir, {"workers"}), 0);
  REQUIRE(in_group0.size() == 2);
  const std::vector<std::size_t> log_at_kill = logSizes(dir, in_group0);
  const std::size_t head_log_at_kill = readFile(dir + "/head.log").size();
  const double killed_at = wallNow();
  REQUIRE(::kill(node_a->pid(), SIGKILL) == 0);
  REQUIRE(waitForText(dir + "/head.log", "group_recreated: group 0 re-created on node", 30000ms));
  const std::string head_log = readFile(dir + "/head.log");
  const double detected = stampOf(head_log, "group_failure", head_log_at_kill) - killed_at;
  const double recreated = stampOf(head_log, "group_recreated", head_log_at_kill) - killed_at;
  // Its workers come back to group 0, now served by node b.
  double back = 0;
  for (std::size_t k = 0; k < in_group0.size(); ++k) {
    const std::string wlog = dir + "/w" + std::to_string(in_group0[k]) + ".log";
    const bool moved = waitUntil(
        [&] { return stampOf(readFile(wlog), "assigned: group 0", log_at_kill[k]) > 0; }, 30000ms);
    INFO("w" << in_group0[k] << ": " << readFile(wlog));
    REQUIRE(moved);
    back = std::max(back, stampOf(readFile(wlog), "assigned: group 0", log_at_kill[k]) - killed_at);
  }
  const double training_again = trainedAgainAfter(dir, killed_at);
  json st = ctl(dir, {"status"});
  CHECK(st["failed_groups"] == json::array());
  CHECK(st["workers"]["active"] == 4);
  json groups = ctl(dir, {"groups"});
  INFO("groups: " << groups.dump());
  CHECK(groups["groups"][0]["failed"] == false);
  CHECK(groups["groups"][0]["members"] == 2);
  CHECK(groups["groups"][1]["members"] == 2);
  CHECK(groups["groups"][0]["endpoint"] != old_endpoint);
  ::kill(head->pid(), SIGTERM);
  REQUIRE(head->wait(90000ms) == std::optional<int>(0));
  CHECK(node_b->wait(20000ms) == std::optional<int>(0));
  checkWorkersExit(dir, workers, 20000ms);
  json s = json::parse(readFile(dir + "/summary.json"));
  INFO("head: " << readFile(dir + "/head.log"));
  checkAccounting(s);
  REQUIRE(s["node_failures"].size() == 1);
  const json& f = s["node_failures"][0];
  CHECK(f["group"] == 0);
  CHECK(f["recreated_on_node"].is_number());
  CHECK(f["reassigned"].size() == 2);
  const auto lost = s["samples_lost_in_failed_groups"].get<std::uint64_t>();
  CHECK(lost <= f["samples_lost_bound"].get<std::uint64_t>());
  std::printf(
      "failover: node SIGKILL with a spare slot: group 0 declared failed %.2f s later, "
      "re-created on node b at %.2f s; both its workers back in group 0 by %.2f s; "
      "+2000 samples by %.2f s; lost with the group: %llu samples (bound %llu); "
      "summary trained %llu applied %llu dropped %llu\n",
      detected, recreated, back, training_again, static_cast<unsigned long long>(lost),
      llu(f["samples_lost_bound"]), llu(s["samples_trained"]), llu(s["samples_applied"]),
      llu(s["samples_dropped"]));
  reportDone(dir);
}
