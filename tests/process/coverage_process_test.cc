// data_allocation ranges on real processes (docs/protocol.md, "Sample ranges"): four
// trainers, one 4x slower, one drained and one SIGKILLed mid-run, and a fifth joining
// after them; every epoch the run finished visited every sample once, and the only
// duplicates are what the killed trainer held unacknowledged.
#include <doctest/doctest.h>

#include <signal.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon_harness.h"
#include "head_restart.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr std::uint64_t kBatch = 64;
constexpr std::uint64_t kChunk = 16 * kBatch;  // the coordinator's range size

// Steps of the trainer named `name` (groupsgdctl workers), or 0.
std::uint64_t stepsOf(const std::string& dir, const std::string& name) {
  const json rows = ctl(dir, {"workers"});
  if (!rows.is_object() || !rows.contains("workers")) return 0;
  for (const auto& w : rows["workers"]) {
    if (w["name"] == name) return w["steps"].get<std::uint64_t>();
  }
  return 0;
}

}  // namespace

TEST_CASE(
    "coverage: ranges visit every sample once per epoch despite a straggler, a drain "
    "and a kill") {
  const std::string dir = makeTempDir();
  // 2.7 epochs of Fashion-MNIST's 60000 training samples: at least two finish.
  auto daemon = startDaemon(dir, "daemon.log", "tcp://127.0.0.1:0",
                            {"--progress-ms",
                             "0",
                             "--mode",
                             "grouped",
                             "--workers",
                             "4",
                             "--groups",
                             "2",
                             "--batch-size",
                             std::to_string(kBatch),
                             "--data-allocation",
                             "ranges",
                             "--heartbeat-ms",
                             "250",
                             "--step-deadline-ms",
                             "2000",
                             "--max-samples",
                             "160000",
                             "--max-seconds",
                             "100"});
  const std::string ep = endpointIn(dir);
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 4; ++i) {
    std::vector<std::string> argv = {WORKER_PATH, "--coordinator",        ep, "--device-ms", "4",
                                     "--name",    "w" + std::to_string(i)};
    if (i == 0) argv.insert(argv.end(), {"--slowdown", "4"});  // the straggler
    workers.push_back(std::make_unique<Process>(argv, dir + "/w" + std::to_string(i) + ".log"));
  }
  // Kill w3 and drain w2 once each has trained a while (within the first epoch).
  REQUIRE(waitUntil([&] { return stepsOf(dir, "w3") >= 20; }, 60000ms, 100ms));
  REQUIRE(::kill(workers[3]->pid(), SIGKILL) == 0);
  REQUIRE(waitUntil([&] { return stepsOf(dir, "w2") >= 40; }, 60000ms, 100ms));
  (void)ctlJson(dir, {"drain", "w2"});
  // A trainer joining mid-run claims ranges like the others.
  workers.push_back(
      std::make_unique<Process>(std::vector<std::string>{WORKER_PATH, "--coordinator", ep,
                                                         "--device-ms", "4", "--name", "w4"},
                                dir + "/w4.log"));
  auto rc = daemon->wait(120000ms);
  REQUIRE_MESSAGE(rc.has_value(), "the daemon did not stop in time");
  CHECK(*rc == 0);
  for (int i : {0, 1, 2, 4}) CHECK(workers[i]->wait(20000ms) == std::optional<int>(0));
  const json s = readSummary(dir);
  INFO("epochs: " << s["epochs"].dump());
  INFO("events: " << s["events"].dump());
  checkAccounting(s);
  bool joiner_trained = false;
  for (const auto& w : s["worker_stats"]) {
    if (w["name"] == "w4") joiner_trained = w["samples"].get<std::uint64_t>() > 0;
  }
  CHECK(joiner_trained);
  CHECK(s["data_allocation"] == "ranges");
  REQUIRE(s["epochs"].is_array());
  std::size_t finished = 0;
  std::uint64_t duplicates = 0, returned = 0;
  for (const auto& e : s["epochs"]) {
    CHECK(e["samples"] == 60000);
    duplicates += e["duplicates"].get<std::uint64_t>();
    returned += e["returned"].get<std::uint64_t>();
    if (e["finished"] != true) continue;
    ++finished;
    CHECK(e["coverage"].get<double>() == 1.0);
    CHECK(e["acknowledged"] == 60000);
  }
  CHECK(finished >= 2);
  // The killed trainer held its current range and at most one more that its last batch
  // finished: issued again, counted as duplicates. Nothing else is (the drained and
  // stopped trainers said what they trained).
  CHECK(duplicates > 0);
  CHECK(duplicates <= 2 * kChunk);
  // Exactly what the coordinator took back from the dead trainer, as its log says.
  const std::string log = readFile(dir + "/daemon.log");
  const std::string said = "unacknowledged samples are issued again";
  std::uint64_t released = 0;
  std::size_t lines = 0;
  for (std::size_t at = log.find(said); at != std::string::npos; at = log.find(said, at + 1)) {
    const std::size_t its = log.rfind(" its ", at);
    REQUIRE(its != std::string::npos);
    released += std::stoull(log.substr(its + 5, at - its - 5));
    ++lines;
  }
  INFO("daemon log: " << log.substr(log.size() > 4000 ? log.size() - 4000 : 0));
  CHECK(lines == 1);  // the killed trainer only
  CHECK(log.find("declared dead: its") != std::string::npos);
  CHECK(released == duplicates);
  CHECK(returned > 0);  // the drained trainer handed back its untrained rest
  std::printf("coverage: %zu finished epochs, duplicates %llu (bound %llu), returned %llu\n",
              finished, static_cast<unsigned long long>(duplicates),
              static_cast<unsigned long long>(2 * kChunk),
              static_cast<unsigned long long>(returned));
  reportDone(dir);
}

namespace {

// The newest record of DIR/ck/epoch_ledger.json (ledger_record.h), or null.
json newestLedgerRecord(const std::string& dir) {
  std::ifstream in(dir + "/ck/epoch_ledger.json");
  if (!in) return json();
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("checkpoints") || j["checkpoints"].empty()) return json();
  return j["checkpoints"].back();
}

// Epoch 0's acknowledged positions in a ledger record (0 when it has none).
std::uint64_t epoch0Acknowledged(const json& record) {
  if (!record.is_object()) return 0;
  for (const auto& e : record["ledger"]["epochs"]) {
    if (e[0] == 0) return e[1].get<std::uint64_t>();
  }
  return 0;
}

}  // namespace

TEST_CASE("coverage: a head killed mid-epoch and restarted goes on with the epoch's ledger") {
  const std::string dir = makeTempDir();
  const std::vector<std::string> args =
      withArgs(checkpointedHeadArgs(dir, 4, 10),
               {"--batch-size", std::to_string(kBatch), "--data-allocation", "ranges"});
  auto head = startDaemon(dir, "head1.log", "tcp://127.0.0.1:0", args);
  const std::string ep = endpointIn(dir);
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 4; ++i) workers.push_back(startWorker(dir, ep, i, kRecoveringWorker));
  // A checkpoint's ledger record with a sixth of epoch 0 acknowledged, the epoch unfinished.
  json record;
  REQUIRE(waitUntil(
      [&] {
        record = newestLedgerRecord(dir);
        return epoch0Acknowledged(record) >= 10000;
      },
      90000ms, 100ms));
  REQUIRE(record["ledger"]["cut_epoch"] == 0);
  const HeadRestart restart = restartHead(
      dir, *head, ep, withArgs(args, {"--max-samples", "100000", "--max-seconds", "120"}), 1000ms);
  REQUIRE(waitForText(dir + "/head2.log", "resumed from", 10000ms));
  REQUIRE(restart.head->wait(150000ms) == std::optional<int>(0));
  checkWorkersExit(dir, workers, 30000ms);
  const json s = readSummary(dir);
  INFO("epochs: " << s["epochs"].dump());
  INFO("ledger: " << s["epoch_ledger_resumed"].dump());
  INFO("head2: " << readFile(dir + "/head2.log"));
  checkAccounting(s);
  // The restarted head took the ledger recorded with a checkpoint it could resume from,
  // not a fresh one: epoch 0 went on from what was acknowledged before the kill.
  const json& resumed = s["epoch_ledger_resumed"];
  REQUIRE(resumed.is_object());
  CHECK(resumed["version"].get<std::uint64_t>() <=
        s["head_restart"]["resumed_version"].get<std::uint64_t>());
  CHECK(resumed["acknowledged"].get<std::uint64_t>() >= 10000);
  REQUIRE(s["epochs"].is_array());
  REQUIRE(!s["epochs"].empty());
  const json& e0 = s["epochs"][0];
  CHECK(e0["epoch"] == 0);
  CHECK(e0["finished"] == true);
  CHECK(e0["coverage"].get<double>() == 1.0);
  CHECK(e0["acknowledged"] == 60000);
  // Duplicates: what the old head's four trainers held when the ledger was recorded (a
  // range each and at most one more), issued again after the restart.
  CHECK(e0["duplicates"].get<std::uint64_t>() <= 4 * 2 * kChunk);
  CHECK(e0["duplicates"].get<std::uint64_t>() == resumed["held_reissued"].get<std::uint64_t>());
  reportDone(dir);
}
