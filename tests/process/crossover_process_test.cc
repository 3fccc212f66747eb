// Two training runs (two daemons, job ids 1 and 2) whose workers share two
// emulated devices through a real groupsgd-arbiter (docs/arbiter.md): both
// finish with their accounting intact, and killing the arbiter mid-run only
// makes the workers compute unarbitrated (each says so once); no step hangs.
#include <doctest/doctest.h>

#include <signal.h>

#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "groupsgd/arbiter/lease_client.h"
#include "process.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

std::string firstLine(const std::string& path) {
  std::string s = readFile(path);
  return s.substr(0, s.find('\n'));
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// An arbiter, two daemons (jobs 1 and 2, sync mode, 2 workers each) and their
// workers; worker i of each job computes on device "dev<i>".
struct SharedCluster {
  std::string dir = makeTempDir();
  std::unique_ptr<Process> arbiter;
  std::string arbiter_ep;
  std::vector<std::unique_ptr<Process>> daemons;
  std::vector<std::unique_ptr<Process>> workers;
  std::vector<std::string> worker_logs;

  explicit SharedCluster(const std::string& policy, std::uint64_t samples) {
    arbiter = std::make_unique<Process>(
        std::vector<std::string>{ARBITER_PATH, "--listen", "tcp://127.0.0.1:0", "--endpoint-file",
                                 dir + "/arbiter.ep", "--policy", policy, "--keepalive-ms", "50"},
        dir + "/arbiter.log");
    REQUIRE_MESSAGE(waitForFile(dir + "/arbiter.ep", 10000ms), readFile(dir + "/arbiter.log"));
    arbiter_ep = firstLine(dir + "/arbiter.ep");
    for (int job = 1; job <= 2; ++job) {
      const std::string j = std::to_string(job);
      daemons.push_back(
          std::make_unique<Process>(std::vector<std::string>{GROUPSGDD_PATH,
                                                             "--listen",
                                                             "tcp://127.0.0.1:0",
                                                             "--endpoint-file",
                                                             dir + "/daemon" + j + ".ep",
                                                             "--summary-file",
                                                             dir + "/summary" + j + ".json",
                                                             "--progress-ms",
                                                             "0",
                                                             "--heartbeat-ms",
                                                             "300",
                                                             "--job-id",
                                                             j,
                                                             "--mode",
                                                             "sync",
                                                             "--workers",
                                                             "2",
                                                             "--max-samples",
                                                             std::to_string(samples),
                                                             "--max-seconds",
                                                             "60"},
                                    dir + "/daemon" + j + ".log"));
    }
    for (int job = 1; job <= 2; ++job) {
      const std::string j = std::to_string(job);
      REQUIRE_MESSAGE(waitForFile(dir + "/daemon" + j + ".ep", 10000ms),
                      readFile(dir + "/daemon" + j + ".log"));
      const std::string ep = firstLine(dir + "/daemon" + j + ".ep");
      for (int i = 0; i < 2; ++i) {
        worker_logs.push_back(dir + "/worker-" + j + "-" + std::to_string(i) + ".log");
        workers.push_back(std::make_unique<Process>(
            std::vector<std::string>{
                WORKER_PATH, "--coordinator", ep, "--job-id", j, "--device-ms", "4", "--link-ms",
                "2", "--shared-device", "dev" + std::to_string(i), "--arbiter", arbiter_ep,
                "--arbiter-timeout-ms", "300", "--device-lock-dir", dir + "/devices"},
            worker_logs.back()));
      }
    }
  }
  ~SharedCluster() {
    workers.clear();
    daemons.clear();
    arbiter.reset();
    removeTestDir(dir);
  }
  // Waits for both runs; returns their summaries.
  std::vector<json> finish() {
    std::vector<json> out;
    for (std::size_t d = 0; d < daemons.size(); ++d) {
      const std::string j = std::to_string(d + 1);
      auto rc = daemons[d]->wait(90000ms);
      REQUIRE_MESSAGE(rc == std::optional<int>(0),
                      exitText(rc) << ": " << readFile(dir + "/daemon" + j + ".log"));
      out.push_back(json::parse(readFile(dir + "/summary" + j + ".json")));
    }
    for (std::size_t i = 0; i < workers.size(); ++i) {
      auto rc = workers[i]->wait(15000ms);
      CHECK_MESSAGE(rc == std::optional<int>(0), exitText(rc) << ": " << readFile(worker_logs[i]));
    }
    return out;
  }
};

void checkRun(const json& s, std::uint64_t samples) {
  INFO("summary: " << s.dump());
  CHECK(s["stop_reason"] == "sample budget spent");
  CHECK(s["samples_trained"].get<std::uint64_t>() >= samples);
  CHECK(s["accounting_ok"].get<bool>());
}

}  // namespace

TEST_CASE(
    "crossover: two runs share two devices through the arbiter and both "
    "finish") {
  SharedCluster c("crossover", 6000);
  auto runs = c.finish();
  for (const json& s : runs) checkRun(s, 6000);
  zmq::context_t ctx(1);
  groupsgd::arbiter::LeaseClient client(ctx, c.arbiter_ep, 0);
  auto st = client.stats(3000ms);
  REQUIRE(st.isOk());
  CHECK(st->policy == "crossover");
  REQUIRE(st->jobs.size() == 2);
  for (const auto& j : st->jobs) {
    CAPTURE(j.job_id);
    // Every step of every worker was leased: 2 workers, 6000 samples at batch
    // 32 or more.
    CHECK(j.grants >= 100);
    CHECK(j.held_ms >= 4.0 * static_cast<double>(j.grants));
  }
  CHECK(st->expired == 0);
  for (const auto& log : c.worker_logs) CHECK(count(readFile(log), "unarbitrated") == 0);
}

TEST_CASE(
    "crossover: the arbiter killed mid-run; both runs finish, each "
    "worker says so once") {
  SharedCluster c("crossover", 9000);
  zmq::context_t ctx(1);
  groupsgd::arbiter::LeaseClient client(ctx, c.arbiter_ep, 0);
  // Kill it once both jobs have computed under it for a while.
  REQUIRE(waitUntil(
      [&] {
        auto st = client.stats(1000ms);
        return st.isOk() && st->jobs.size() == 2 && st->jobs[0].grants >= 40 &&
               st->jobs[1].grants >= 40;
      },
      60000ms, 100ms));
  ::kill(c.arbiter->pid(), SIGKILL);
  (void)c.arbiter->wait(5000ms);
  auto runs = c.finish();
  for (const json& s : runs) checkRun(s, 9000);
  for (const auto& log : c.worker_logs) {
    INFO(log << ":\n" << readFile(log));
    CHECK(count(readFile(log), "unarbitrated") == 1);
  }
}

TEST_CASE("crossover: a daemon hosts the arbiter (arbiter_listen) for its node's workers") {
  const std::string dir = makeTempDir();
  Process daemon({GROUPSGDD_PATH,
                  "--listen",
                  "tcp://127.0.0.1:0",
                  "--endpoint-file",
                  dir + "/daemon.ep",
                  "--summary-file",
                  dir + "/summary.json",
                  "--progress-ms",
                  "0",
                  "--heartbeat-ms",
                  "300",
                  "--mode",
                  "sync",
                  "--workers",
                  "2",
                  "--max-samples",
                  "4000",
                  "--max-seconds",
                  "60",
                  "--arbiter-listen",
                  "tcp://127.0.0.1:0",
                  "--arbiter-policy",
                  "fifo"},
                 dir + "/daemon.log");
  REQUIRE_MESSAGE(waitForFile(dir + "/daemon.ep", 10000ms), readFile(dir + "/daemon.log"));
  REQUIRE(waitForText(dir + "/daemon.log", "arbiter on tcp://", 10000ms));
  const std::string log = readFile(dir + "/daemon.log");
  const auto at = log.find("arbiter on ") + 11;
  const std::string arbiter_ep = log.substr(at, log.find(',', at) - at);
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(std::make_unique<Process>(
        std::vector<std::string>{WORKER_PATH, "--coordinator", firstLine(dir + "/daemon.ep"),
                                 "--device-ms", "2", "--shared-device", "dev" + std::to_string(i),
                                 "--arbiter", arbiter_ep, "--device-lock-dir", dir + "/devices"},
        dir + "/worker-" + std::to_string(i) + ".log"));
  }
  zmq::context_t ctx(1);
  groupsgd::arbiter::LeaseClient client(ctx, arbiter_ep, 0);
  CHECK(waitUntil(
      [&] {
        auto st = client.stats(1000ms);
        return st.isOk() && st->policy == "fifo" && !st->jobs.empty() && st->jobs[0].grants >= 20;
      },
      30000ms, 100ms));
  auto rc = daemon.wait(60000ms);
  CHECK_MESSAGE(rc == std::optional<int>(0), readFile(dir + "/daemon.log"));
  for (int i = 0; i < 2; ++i) {
    auto wrc = workers[i]->wait(15000ms);
    CHECK_MESSAGE(wrc == std::optional<int>(0),
                  readFile(dir + "/worker-" + std::to_string(i) + ".log"));
  }
  workers.clear();
  removeTestDir(dir);
}
