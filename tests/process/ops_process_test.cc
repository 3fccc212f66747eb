// Operating a real daemon: the control socket through groupsgdctl and the add/drain
// scripts during training, and SIGTERM -> checkpoint -> restart -> resume.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "daemon_harness.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// The harness's daemon with the settings every test here shares.
std::unique_ptr<Process> startOpsDaemon(const std::string& dir, const std::string& log,
                                        std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--progress-ms", "0", "--heartbeat-ms", "250"});
  return startDaemon(dir, log, "tcp://127.0.0.1:0", std::move(extra));
}

// N workers named wI against EP, DEVICE_MS of emulated device time a step, their output in
// DIR/wI.log.
std::vector<std::unique_ptr<Process>> startNamedWorkers(const std::string& dir,
                                                        const std::string& ep, int n,
                                                        const std::string& device_ms) {
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < n; ++i) {
    workers.push_back(std::make_unique<Process>(
        std::vector<std::string>{WORKER_PATH, "--coordinator", ep, "--device-ms", device_ms,
                                 "--name", "w" + std::to_string(i)},
        dir + "/w" + std::to_string(i) + ".log"));
  }
  return workers;
}

}  // namespace

TEST_CASE("ops: add-worker and drain-worker scripts during training; groupsgdctl exit codes") {
  const std::string dir = makeTempDir();
  auto daemon =
      startOpsDaemon(dir, "daemon.log", {"--mode", "grouped", "--workers", "3", "--groups", "1"});
  const std::string ep = endpointIn(dir);
  const std::string sock = dir + "/ctl.sock";
  std::vector<std::unique_ptr<Process>> workers = startNamedWorkers(dir, ep, 2, "3");
  const std::string scripts = std::string(SOURCE_DIR) + "/scripts";
  // The script starts a real worker process and waits until it is registered.
  CHECK(runTool({"/bin/bash", scripts + "/add-worker.sh", "--socket", sock, "--coordinator", ep,
                 "--name", "extra", "--log-dir", dir, "--", "--device-ms", "3"},
                dir + "/add.log") == 0);
  INFO("add: " << readFile(dir + "/add.log"));
  // Idempotent: a second run finds it active and does nothing.
  CHECK(runTool({"/bin/bash", scripts + "/add-worker.sh", "--socket", sock, "--coordinator", ep,
                 "--name", "extra"},
                dir + "/add2.log") == 0);
  CHECK(readFile(dir + "/add2.log").find("nothing to do") != std::string::npos);
  // Drain it once it trains (a few answered pushes), not after a fixed time.
  CHECK(waitUntil(
      [&] {
        if (runTool({GROUPSGDCTL_PATH, "--socket", sock, "--json", "workers"}, dir + "/poll.log") !=
            0) {
          return false;
        }
        const json rows = json::parse(readFile(dir + "/poll.log"), nullptr, false);
        if (!rows.is_object() || !rows.contains("workers")) return false;
        for (const auto& w : rows["workers"]) {
          if (w["name"] == "extra" && w["steps"].get<std::uint64_t>() >= 5) return true;
        }
        return false;
      },
      30000ms, 200ms));
  CHECK(runTool({"/bin/bash", scripts + "/drain-worker.sh", "--socket", sock, "extra"},
                dir + "/drain.log") == 0);
  INFO("drain: " << readFile(dir + "/drain.log"));
  CHECK(readFile(dir + "/drain.log").find("left") != std::string::npos);
  CHECK(runTool({"/bin/bash", scripts + "/drain-worker.sh", "--socket", sock, "extra"},
                dir + "/drain2.log") == 0);  // already gone: still a success
  // groupsgdctl: refused by the daemon -> 1; usage or connection errors -> 2.
  CHECK(runTool({GROUPSGDCTL_PATH, "--socket", sock, "drain", "nobody"}, dir + "/c1.log") == 1);
  CHECK(runTool({GROUPSGDCTL_PATH, "--socket", dir + "/absent.sock", "status"}, dir + "/c2.log") ==
        2);
  CHECK(runTool({GROUPSGDCTL_PATH, "--socket", sock, "frobnicate"}, dir + "/c3.log") == 2);
  CHECK(runTool({GROUPSGDCTL_PATH, "--socket", sock, "--json", "status"}, dir + "/c4.log") == 0);
  json st = json::parse(readFile(dir + "/c4.log"));
  CHECK(st["workers"]["left"] == 1);
  CHECK(st["workers"]["active"] == 2);
  // Training went on without the drained worker; stop it over the socket.
  CHECK(runTool({GROUPSGDCTL_PATH, "--socket", sock, "shutdown"}, dir + "/c5.log") == 0);
  CHECK(daemon->wait(60000ms) == std::optional<int>(0));
  for (auto& w : workers) CHECK(w->wait(20000ms) == std::optional<int>(0));
  json s = readSummary(dir);
  INFO("summary: " << s.dump());
  bool drained_clean = false;
  for (const auto& w : s["worker_stats"]) {
    if (w["name"] == "extra") drained_clean = w["state"] == "left" && w["samples"].get<int>() > 0;
  }
  CHECK(drained_clean);
  CHECK(s["accounting_ok"].get<bool>());
  removeTestDir(dir);
}

TEST_CASE("ops: SIGTERM checkpoints; a restart resumes at the same central version") {
  const std::string dir = makeTempDir();
  auto daemon = startOpsDaemon(
      dir, "d1.log", {"--mode", "sync", "--workers", "2", "--checkpoint-dir", dir + "/ck"});
  const std::string ep = endpointIn(dir);
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(std::make_unique<Process>(
        std::vector<std::string>{WORKER_PATH, "--coordinator", ep, "--device-ms", "3"},
        dir + "/w" + std::to_string(i) + ".log"));
  }
  // SIGTERM once both trainers trained, not after a fixed time.
  CHECK(waitUntil(
      [&] {
        if (runTool({GROUPSGDCTL_PATH, "--socket", dir + "/ctl.sock", "--json", "status"},
                    dir + "/poll.log") != 0) {
          return false;
        }
        const json st = json::parse(readFile(dir + "/poll.log"), nullptr, false);
        return st.is_object() && st["workers"].value("active", 0) == 2 &&
               st.value("samples_trained", std::uint64_t{0}) > 0;
      },
      30000ms, 200ms));
  ::kill(daemon->pid(), SIGTERM);
  REQUIRE(daemon->wait(60000ms) == std::optional<int>(0));
  for (auto& w : workers) CHECK(w->wait(20000ms) == std::optional<int>(0));
  json s = readSummary(dir);
  const auto version = s["central_version"].get<std::uint64_t>();
  REQUIRE(version > 0);
  CHECK(s["accounting_ok"].get<bool>());
  // The checkpoint written at shutdown holds that version.
  char name[64];
  std::snprintf(name, sizeof name, "/ck/ckpt-%020llu.gsgd",
                static_cast<unsigned long long>(version));
  CHECK(std::filesystem::exists(dir + name));
  // A damaged newer file must not win over it.
  {
    std::ofstream junk(dir + "/ck/ckpt-00000000009999999999.gsgd");
    junk << "torn write";
  }
  auto again = startOpsDaemon(
      dir, "d2.log",
      {"--mode", "sync", "--workers", "2", "--checkpoint-dir", dir + "/ck", "--max-seconds", "1"});
  REQUIRE(waitForText(dir + "/d2.log", "resumed from", 10000ms));
  const std::string log = readFile(dir + "/d2.log");
  CHECK(log.find("at version " + std::to_string(version)) != std::string::npos);
  CHECK(log.find("skipped") != std::string::npos);
  ::kill(again->pid(), SIGTERM);
  CHECK(again->wait(30000ms) == std::optional<int>(0));
  removeTestDir(dir);
}

TEST_CASE("ops: multi-node roles: a coordinator daemon and a node daemon hosting the group PSes") {
  const std::string dir = makeTempDir();
  auto head = startOpsDaemon(dir, "head.log",
                             {"--role", "coordinator", "--mode", "grouped", "--workers", "4",
                              "--groups", "2", "--max-samples", "20000", "--max-seconds", "60"});
  const std::string ep = endpointIn(dir);
  // Workers may come first: they are told to retry until a node offers the group PSes.
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 4; ++i) {
    workers.push_back(std::make_unique<Process>(
        std::vector<std::string>{WORKER_PATH, "--coordinator", ep, "--device-ms", "3",
                                 "--log-level", "debug"},
        dir + "/w" + std::to_string(i) + ".log"));
  }
  // The workers really came first: the head told them to wait for node daemons.
  CHECK(waitForText(dir + "/w0.log", "waiting for node daemons", 20000ms));
  Process node({GROUPSGDD_PATH, "--role", "node", "--coordinator", ep, "--node-groups", "2",
                "--mode", "grouped", "--workers", "4", "--groups", "2", "--heartbeat-ms", "250"},
               dir + "/node.log");
  REQUIRE(head->wait(90000ms) == std::optional<int>(0));
  CHECK(node.wait(20000ms) == std::optional<int>(0));  // told to stop after the final flush
  for (auto& w : workers) CHECK(w->wait(20000ms) == std::optional<int>(0));
  json s = readSummary(dir);
  INFO("summary: " << s.dump());
  INFO("node: " << readFile(dir + "/node.log"));
  CHECK(s["stop_reason"] == "sample budget spent");
  REQUIRE(s["group_stats"].size() == 2);
  for (const auto& g : s["group_stats"]) CHECK(g["steps"].get<int>() > 10);
  bool offered = false;
  for (const auto& e : s["events"]) offered |= e["kind"] == "node";
  CHECK(offered);
  CHECK(s["accounting_ok"].get<bool>());
  removeTestDir(dir);
}

TEST_CASE("ops: every control method answers a live adaptive daemon (contract)") {
  const std::string dir = makeTempDir();
  auto daemon = startOpsDaemon(dir, "daemon.log",
                               {"--mode", "adaptive", "--workers", "3", "--checkpoint-dir",
                                dir + "/ck", "--control-ms", "300", "--profile-steps", "5"});
  const std::string ep = endpointIn(dir);
  const std::string sock = dir + "/ctl.sock";
  std::vector<std::unique_ptr<Process>> workers = startNamedWorkers(dir, ep, 3, "4");
  // expect: the exit code required (checked), -1: 0 or 1 (checked), -2: anything (polling).
  auto ctl = [&](std::vector<std::string> args, int expect) {
    std::vector<std::string> argv = {GROUPSGDCTL_PATH, "--socket", sock, "--json"};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string log = dir + "/ctl.log";
    const int rc = runTool(argv, log);
    const std::string out = readFile(log);
    if (expect >= 0) CHECK_MESSAGE(rc == expect, args[0] << ": " << out);
    if (expect == -1) CHECK_MESSAGE((rc == 0 || rc == 1), args[0] << ": " << out);
    return rc == 0 ? json::parse(out, nullptr, false) : json();
  };
  // Poll, not a fixed sleep: on a loaded machine the three registrations and the profiling
  // steps can take seconds. Wait until all three train and the central model has moved.
  waitUntil(
      [&] {
        const json w = ctl({"workers"}, -2);
        const json s = ctl({"status"}, -2);
        return w.is_object() && w.contains("workers") && w["workers"].size() == 3 &&
               s.is_object() && s.value("central_version", std::uint64_t{0}) > 5;
      },
      90s, 250ms);
  CHECK(ctl({"version"}, 0)["control_protocol"] == 1);
  json st = ctl({"status"}, 0);
  CHECK(st["mode"] == "adaptive");
  CHECK(st["state"] == "training");
  json ws = ctl({"workers"}, 0);
  CHECK(ws["workers"].size() == 3);
  json gs = ctl({"groups"}, 0);
  CHECK(gs["groups"].size() >= 1);
  json dry = ctl({"regroup", "--dry-run"}, 0);
  CHECK(dry.contains("applied"));
  CHECK(dry["applied"] == false);
  json set = ctl({"set", "max_samples=400000"}, 0);
  CHECK(set["applied"]["max_samples"] == 400000);
  CHECK(set["previous"]["max_samples"] == 0);
  ctl({"set", "batch_size=7"}, 1);  // not a runtime setting: refused, nothing changes
  json ck = ctl({"checkpoint"}, 0);
  CHECK(ck["version"].get<std::uint64_t>() > 0);
  CHECK(std::filesystem::exists(ck["path"].get<std::string>()));
  json dr = ctl({"drain", "w2"}, 0);
  CHECK(dr["state"] == "draining");
  // Undrain races with the drain completing: active again (0) or "already left" (1).
  ctl({"undrain", "w2"}, -1);
  ctl({"raw", "no_such_method"}, 1);
  ctl({"undrain", "nobody"}, 1);
  ctl({"shutdown"}, 0);
  CHECK(daemon->wait(60000ms) == std::optional<int>(0));
  for (auto& w : workers) CHECK(w->wait(20000ms) == std::optional<int>(0));
  CHECK(readSummary(dir)["accounting_ok"].get<bool>());
  removeTestDir(dir);
}
