// Process tests: the real groupsgdd and groupsgd-worker binaries on TCP loopback, ports
// chosen by the OS, training on the Fashion-MNIST package's files.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "daemon_harness.h"
#include "worker_run.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

struct Cluster : WorkerRun {
  explicit Cluster(std::vector<std::string> daemon_args) {
    daemon_args.insert(daemon_args.begin(), {"--progress-ms", "0", "--heartbeat-ms", "300"});
    start(std::move(daemon_args), DaemonFiles{.control_socket = false});
  }
};

// Three workers (1 ms steps) training in MODE for 15000 samples: the run's summary.
json threeWorkerSummary(const std::string& mode) {
  Cluster c({"--mode", mode, "--workers", "3", "--max-samples", "15000", "--max-seconds", "60"});
  for (int i = 0; i < 3; ++i) c.addWorker({"--device-ms", "1"});
  return c.finish(90000ms);
}

}  // namespace

TEST_CASE(
    "process: grouped mode with 4 workers reaches 0.80 test accuracy; bad input is refused while "
    "training goes on") {
  Cluster c({"--mode", "grouped", "--workers", "4", "--groups", "2", "--target-acc", "0.80",
             "--max-seconds", "90"});
  for (int i = 0; i < 4; ++i) c.addWorker({"--device-ms", "2"});
  c.addWorker({"--evaluate", "--eval-interval-ms", "200"});
  // The probe registers mid-run and sends a malformed header, a wrong-length gradient and a
  // NaN gradient; each must come back as an error reply.
  Process probe({PROBE_PATH, c.endpoint}, c.dir + "/probe.log");
  auto probe_rc = probe.wait(30000ms);
  INFO("probe: " << readFile(c.dir + "/probe.log"));
  CHECK(probe_rc == std::optional<int>(0));
  json s = c.finish(120000ms);
  INFO("summary: " << s.dump());
  CHECK(s["reached"].get<bool>());
  CHECK(s["time_to_target_s"].get<double>() > 0);
  // The final model may sit below the peak that reached the target: 0.69 after 0.82 once in
  // CI under load (reached at version 503 after 1.9 s, final at 663 after the drain).
  CHECK(s["final_test_acc"].get<double>() >= 0.60);
  CHECK(s["bad_messages"].get<std::uint64_t>() >= 3);
  CHECK(s["groups"].get<int>() == 2);
  checkAccounting(s);
}

TEST_CASE("process: sync mode trains and keeps the accounting invariant") {
  json s = threeWorkerSummary("sync");
  INFO("summary: " << s.dump());
  CHECK(s["stop_reason"] == "sample budget spent");
  CHECK(s["groups"].get<int>() == 1);
  CHECK(s["central"]["max_staleness"].get<std::uint64_t>() == 0);  // one group: never stale
  checkAccounting(s);
}

TEST_CASE("process: async mode weights stale updates and keeps the accounting invariant") {
  json s = threeWorkerSummary("async");
  INFO("summary: " << s.dump());
  CHECK(s["groups"].get<int>() == 3);
  CHECK(s["central"]["mean_staleness"].get<double>() > 0);  // groups interleave
  checkAccounting(s);
}

TEST_CASE(
    "process: a straggler in sync mode past the step deadline is dropped and counted, never lost") {
  Cluster c({"--mode", "sync", "--workers", "2", "--max-samples", "6000", "--max-seconds", "60",
             "--step-deadline-ms", "40"});
  c.addWorker({"--device-ms", "1"});
  // Emulated device time, not a multiple of real compute: a slowdown factor on a loaded
  // machine can stretch one step past the heartbeat limit and get the worker declared dead.
  c.addWorker({"--device-ms", "80"});
  json s = c.finish(90000ms);
  INFO("summary: " << s.dump());
  CHECK(s["late_gradients"].get<std::uint64_t>() > 0);
  CHECK(s["samples_dropped"].get<std::uint64_t>() > 0);
  checkAccounting(s);
}

TEST_CASE("process: the final model is measured at once, whatever the evaluator's interval") {
  // The evaluator measures every 20 s: without the coordinator's "measure now" the run
  // would wait up to 5 s for a final reading and end with an older version's accuracy.
  Cluster c({"--mode", "sync", "--workers", "2", "--max-samples", "6000", "--max-seconds", "60",
             "--log-level", "info"});
  for (int i = 0; i < 2; ++i) c.addWorker({"--device-ms", "1"});
  c.addWorker({"--evaluate", "--eval-interval-ms", "20000"});
  REQUIRE(waitForText(c.dir + "/daemon.log", "stopping:", 60000ms));
  const double stopping = wallNow();
  const json s = c.finish(30000ms);
  const double ended = wallNow() - stopping;
  INFO(s.dump());
  CHECK(s["accounting_ok"] == true);
  CHECK(s["final_test_acc"].is_number());
  CHECK(s["final_acc_version"] == s["central_version"]);
  CHECK(ended < 4.0);  // 5 s of waiting for a reading, and the interval, are gone
}

TEST_CASE("process: a worker given a missing data directory exits 2 with a clear message") {
  const std::string dir = makeTempDir();
  Process w({WORKER_PATH, "--coordinator", "tcp://127.0.0.1:1", "--data", dir + "/nowhere"},
            dir + "/w.log");
  CHECK(w.wait(20000ms) == std::optional<int>(2));
  const std::string log = readFile(dir + "/w.log");
  CHECK(log.find("nowhere") != std::string::npos);
  removeTestDir(dir);
}

TEST_CASE("process: the daemon refuses a bad configuration with one clear line") {
  const std::string dir = makeTempDir();
  {
    std::ofstream f(dir + "/bad.json");
    f << "{\"workers\": 4, \"grups\": 2}";
  }
  Process d({GROUPSGDD_PATH, "--config", dir + "/bad.json"}, dir + "/d.log");
  CHECK(d.wait(10000ms) == std::optional<int>(2));
  CHECK(readFile(dir + "/d.log").find("grups") != std::string::npos);
  Process d2({GROUPSGDD_PATH, "--workers", "two"}, dir + "/d2.log");
  CHECK(d2.wait(10000ms) == std::optional<int>(2));
  CHECK(readFile(dir + "/d2.log").find("--workers") != std::string::npos);
  removeTestDir(dir);
}

TEST_CASE("process: top-k 1% gradients and fp16 deltas (with error feedback) still reach 0.80") {
  // K = 4: the run-end flush finds fp16 delta samples pending every run (the path that once
  // crashed the group PS; with K = 1 only when the flush raced a delta in flight).
  Cluster c({"--mode", "grouped", "--workers", "4", "--groups", "2", "--target-acc", "0.80",
             "--max-seconds", "90", "--compress-gradients", "topk:0.01", "--compress-deltas",
             "fp16", "--exchange-period", "4"});
  for (int i = 0; i < 4; ++i) c.addWorker({"--device-ms", "2"});
  c.addWorker({"--evaluate", "--eval-interval-ms", "200"});
  json s = c.finish(120000ms);
  INFO("summary: " << s.dump());
  CHECK(s["reached"].get<bool>());
  CHECK(s["config"]["compress_gradients"] == "topk:0.01");
  checkAccounting(s);
}
