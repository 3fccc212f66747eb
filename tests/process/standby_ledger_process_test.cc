// Fault test (label `faults`): data_allocation ranges with a standby head. The primary's
// coordinator sends its epoch ledger down the standby link; the primary is SIGKILLed
// mid-epoch 0; the promoted standby's coordinator goes on with the primary's epoch 0
// (docs/reliability.md, "Standby head"): what was acknowledged stays acknowledged, what
// the primary's trainers held is issued again and counted as duplicates, and epoch 0
// finishes with every position acknowledged before the run goes on into epoch 1. The run
// log (events, training clock) goes on as well.
#include <doctest/doctest.h>

#include <filesystem>

#include "daemon_harness.h"
#include "head_restart.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr std::uint64_t kBatch = 64;
constexpr std::uint64_t kChunk = 16 * kBatch;  // the coordinator's range size
constexpr std::uint64_t kEpoch = 60000;        // Fashion-MNIST's training set
constexpr std::uint64_t kKillAfter = 20000;    // samples trained at the primary

std::vector<std::string> headArgs() {
  // 1.5 epochs: epoch 0 finishes on the promoted head and epoch 1 begins.
  return withArgs(standbyPairHeadArgs("150"),
                  {"--batch-size", std::to_string(kBatch), "--data-allocation", "ranges",
                   "--max-samples", std::to_string(kEpoch * 3 / 2)});
}

}  // namespace

TEST_CASE(
    "faults: the primary head SIGKILLed mid-epoch; its standby's coordinator goes on with "
    "the primary's epoch ledger and run log, and the epoch finishes with every position "
    "acknowledged") {
  const std::string dir = makeTempDir();
  const std::string sdir = dir + "/standby";
  std::filesystem::create_directories(sdir);
  const std::string replication = "tcp://127.0.0.1:" + std::to_string(freePort());
  const std::string standby_ep = "tcp://127.0.0.1:" + std::to_string(freePort());

  auto primary = startDaemon(dir, "primary.log", "tcp://127.0.0.1:0",
                             withArgs(headArgs(), {"--replication-listen", replication}));
  const std::string primary_ep = endpointIn(dir);
  auto standby = startDaemon(sdir, "standby.log",
                             withArgs(headArgs(), {"--role", "standby", "--primary", replication}),
                             DaemonFiles{standby_ep, true});
  const std::string list = primary_ep + "," + standby_ep;
  auto node = std::make_unique<Process>(
      std::vector<std::string>{groupsgddPath(), "--role", "node", "--coordinator", list,
                               "--node-groups", "2", "--mode", "grouped", "--workers", "2",
                               "--groups", "2", "--step-deadline-ms", "1000", "--give-up-s", "60",
                               "--coordinator-timeout-ms", "500"},
      dir + "/node.log");
  std::vector<std::unique_ptr<Process>> workers;
  const std::vector<std::string> quick = {"--timeout-ms", "500",         "--backoff-max-ms",
                                          "300",          "--give-up-s", "60"};
  for (int i = 0; i < 2; ++i) workers.push_back(startWorker(dir, list, i, quick));

  // A third of epoch 0 trained at the primary, and the standby holds a coordinator state.
  json st = waitForStatus(
      dir,
      [](const json& s) {
        return s.contains("samples_trained") &&
               s["samples_trained"].get<std::uint64_t>() >= kKillAfter;
      },
      90000ms);
  REQUIRE(st["samples_trained"].get<std::uint64_t>() >= kKillAfter);
  json sst = ctl(sdir, {"status"});
  CHECK(sst["following"] == true);
  CHECK(sst["coordinator_state"] == true);
  killHard(*primary);
  const std::uint64_t trained_at_kill = st["samples_trained"].get<std::uint64_t>();
  REQUIRE(trained_at_kill < kEpoch);  // killed mid-epoch 0

  REQUIRE(standby->wait(180000ms) == std::optional<int>(0));
  CHECK(node->wait(30000ms) == std::optional<int>(0));
  checkWorkersExit(dir, workers, 30000ms);
  const json s = readSummary(sdir);
  INFO("epochs: " << s["epochs"].dump());
  INFO("ledger: " << s["epoch_ledger_resumed"].dump());
  INFO("standby: " << readFile(sdir + "/standby.log"));
  checkAccounting(s);
  CHECK(s["stop_reason"] == "sample budget spent");
  CHECK(s["head_restart"]["versions_lost_bound"] == 0);

  // The promoted head took the primary's ledger from its standby, not a fresh one: what
  // was acknowledged before the status above (less the two trainers' ranges in flight,
  // a current one and at most one more each) stays acknowledged.
  const json& resumed = s["epoch_ledger_resumed"];
  REQUIRE(resumed.is_object());
  CHECK(resumed["from"] == "standby");
  CHECK(resumed["acknowledged"].get<std::uint64_t>() >= trained_at_kill - 2 * 2 * kChunk);
  CHECK(resumed["held_reissued"].get<std::uint64_t>() > 0);
  CHECK(resumed["held_reissued"].get<std::uint64_t>() <= 2 * 2 * kChunk);

  // Epoch 0, running at the kill, finished on the promoted head with every position
  // acknowledged; the run went on into epoch 1.
  REQUIRE(s["epochs"].is_array());
  REQUIRE(s["epochs"].size() >= 2);
  const json& e0 = s["epochs"][0];
  CHECK(e0["epoch"] == 0);
  CHECK(e0["samples"] == kEpoch);
  CHECK(e0["finished"] == true);
  CHECK(e0["coverage"].get<double>() == 1.0);
  CHECK(e0["acknowledged"] == kEpoch);
  // Duplicates: exactly what the primary's trainers held in the followed state, issued
  // again (nobody failed at the promoted head).
  CHECK(e0["duplicates"].get<std::uint64_t>() == resumed["held_reissued"].get<std::uint64_t>());
  CHECK(s["epochs"][1]["epoch"] == 1);

  // The run log went on too: the primary's events (its node daemon's offer) come before
  // the promoted head's "takeover", which is on the primary's training clock (the
  // primary trained a third of an epoch first: over 1.5 s here, not the 0 of a fresh clock).
  INFO("events: " << s["events"].dump());
  std::size_t takeover = s["events"].size(), nodes_before = 0;
  for (std::size_t i = 0; i < s["events"].size(); ++i) {
    if (s["events"][i]["kind"] == "takeover") {
      takeover = i;
      break;
    }
    if (s["events"][i]["kind"] == "node") ++nodes_before;
  }
  REQUIRE(takeover < s["events"].size());
  CHECK(nodes_before >= 1);
  CHECK(s["events"][takeover]["t_s"].get<double>() >= 0.5);
  CHECK(s["elapsed_s"].get<double>() > s["events"][takeover]["t_s"].get<double>());
  std::printf(
      "standby ledger: resumed %llu acknowledged, %llu held issued again; epoch 0 "
      "coverage %.3f, duplicates %llu; takeover event at t_s %.2f of %.2f s, %zu "
      "events before it\n",
      static_cast<unsigned long long>(resumed["acknowledged"].get<std::uint64_t>()),
      static_cast<unsigned long long>(resumed["held_reissued"].get<std::uint64_t>()),
      e0["coverage"].get<double>(),
      static_cast<unsigned long long>(e0["duplicates"].get<std::uint64_t>()),
      s["events"][takeover]["t_s"].get<double>(), s["elapsed_s"].get<double>(), takeover);
  reportDone(dir);
}
