// Fault test (label `faults`): mode adaptive with a standby head. A worker turns 4x slow,
// the primary's controller flags it and regroups it apart from the fast ones; then the
// primary is SIGKILLed. The standby followed the controller's stage and grouping
// (docs/adaptive.md, "Across a standby's takeover"): as the trainers re-register at the
// promoted head, each goes back to the group it had, and the straggler stays apart from
// the fast workers at once, without being detected again.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "daemon_harness.h"
#include "head_restart.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// name -> group of the active trainers in `groupsgdctl workers` of the head in dir.
std::map<std::string, std::uint32_t> trainerGroups(const std::string& dir) {
  std::map<std::string, std::uint32_t> out;
  const json rows = ctl(dir, {"workers"});
  if (!rows.is_object() || !rows.contains("workers")) return out;
  for (const auto& w : rows["workers"]) {
    if (w["role"] != "trainer" || w["state"] != "active") continue;
    out[w["name"].get<std::string>()] = w["group"].get<std::uint32_t>();
  }
  return out;
}

// "slow" in a group none of the 3 fast trainers is in.
bool slowApart(const std::map<std::string, std::uint32_t>& g) {
  if (g.size() != 4 || !g.count("slow")) return false;
  for (const auto& [name, group] : g) {
    if (name != "slow" && group == g.at("slow")) return false;
  }
  return true;
}

}  // namespace

TEST_CASE(
    "faults: mode adaptive, the primary SIGKILLed after it separated a straggler; the "
    "promoted head puts each trainer back in its group, the straggler apart at once") {
  const std::string dir = makeTempDir();
  const std::string sdir = dir + "/standby";
  std::filesystem::create_directories(sdir);
  // As tests/process/adaptive_process_test.cc: a minimum batch of 24 makes grouping, not
  // a batch, the answer to a 4x straggler.
  const json cfg = {{"mode", "adaptive"},
                    {"workers", 4},
                    {"groups", 2},
                    {"heartbeat_ms", 150},
                    {"heartbeat_misses", 12},
                    {"adaptive",
                     {{"control_ms", 300},
                      {"min_batch", 24},
                      {"min_gain", 0.05},
                      {"staleness_penalty", 0.3},
                      {"min_regroup_interval_ms", 1500},
                      {"estimator_window", 8}}}};
  {
    std::ofstream f(dir + "/config.json");
    f << cfg.dump(2);
  }
  const std::vector<std::string> head = {"--config",
                                         dir + "/config.json",
                                         "--progress-ms",
                                         "0",
                                         "--standby-takeover-ms",
                                         "500",
                                         "--max-seconds",
                                         "40"};
  const std::string replication = "tcp://127.0.0.1:" + std::to_string(freePort());
  const std::string standby_ep = "tcp://127.0.0.1:" + std::to_string(freePort());
  auto primary = startDaemon(dir, "primary.log", "tcp://127.0.0.1:0",
                             withArgs(head, {"--replication-listen", replication}));
  const std::string primary_ep = endpointIn(dir);
  auto standby = startDaemon(sdir, "standby.log",
                             withArgs(head, {"--role", "standby", "--primary", replication}),
                             DaemonFiles{standby_ep, true});
  const std::string list = primary_ep + "," + standby_ep;
  const std::vector<std::string> quick = {"--timeout-ms", "500",         "--backoff-max-ms",
                                          "300",          "--give-up-s", "60"};
  std::vector<std::unique_ptr<Process>> workers;
  const auto start = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> argv = {WORKER_PATH, "--coordinator", list, "--name",
                                     name,        "--device-ms",   "30", "--log-level",
                                     "warn"};
    argv.insert(argv.end(), quick.begin(), quick.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    workers.push_back(std::make_unique<Process>(argv, dir + "/" + name + ".log"));
  };
  start("slow", {"--schedule", "3s:slowdown=4"});
  for (int i = 0; i < 3; ++i) start("w" + std::to_string(i), {});

  // The primary separated the straggler; then a control window or two for the standby to
  // have that grouping (sent every window, paced at the heartbeat period).
  std::map<std::string, std::uint32_t> before;
  REQUIRE(waitUntil(
      [&] {
        before = trainerGroups(dir);
        return slowApart(before);
      },
      30000ms, 100ms));
  std::this_thread::sleep_for(800ms);
  before = trainerGroups(dir);
  REQUIRE(slowApart(before));
  CHECK(ctl(sdir, {"status"})["coordinator_state"] == true);
  killHard(*primary);

  // Right after the takeover, as the trainers re-register: each in the group it had.
  std::map<std::string, std::uint32_t> after;
  REQUIRE(waitUntil(
      [&] {
        after = trainerGroups(sdir);
        return after.size() == 4;
      },
      30000ms, 50ms));
  INFO("standby: " << readFile(sdir + "/standby.log"));
  CHECK(slowApart(after));
  CHECK(after == before);

  REQUIRE(standby->wait(90000ms) == std::optional<int>(0));
  for (auto& w : workers) w->wait(30000ms);
  const json s = readSummary(sdir);
  INFO("events: " << s["events"].dump());
  checkAccounting(s);
  // No new onset of "slow" after the takeover: it was known to be a straggler.
  bool taken_over = false;
  int onsets_after = 0;
  for (const auto& e : s["events"]) {
    if (e["kind"] == "takeover") taken_over = true;
    if (taken_over && e["kind"] == "straggler" && e.value("onset", false) &&
        e["text"].get<std::string>().find("(slow)") != std::string::npos) {
      ++onsets_after;
    }
  }
  CHECK(taken_over);
  CHECK(onsets_after == 0);
  reportDone(dir);
}
