// The group optimizer's lr schedule on a real daemon: the group PS's lr (groupsgdctl
// groups) follows the schedule by the run's samples applied, `set optimizer.lr` changes
// its base while the run goes on, and a head restarted from its checkpoint goes on from
// the run's position instead of starting the schedule again.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <numbers>

#include <nlohmann/json.hpp>

#include "daemon_harness.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

struct Observed {
  double lr = 0;
  std::uint64_t samples = 0;
  std::uint64_t members = 0;
};

// Group 0's lr and schedule position as the coordinator last polled them (lr 0: none yet).
Observed observe(const std::string& dir) {
  const json g = ctl(dir, {"groups"});
  if (!g.is_object() || !g.contains("groups") || g["groups"].empty()) return {};
  const json& row = g["groups"][0];
  return {row.value("lr", 0.0), row.value("run_samples", std::uint64_t{0}),
          row.value("members", std::uint64_t{0})};
}

// Polls until an observation of a configured group (a member: it has had its GroupConfig
// and with it the schedule) satisfies `want`; fails the test with the last one otherwise.
template <typename Want>
Observed waitFor(const std::string& dir, Want want, const char* what) {
  Observed last;
  const bool seen = waitUntil(
      [&] {
        last = observe(dir);
        return last.lr > 0 && last.members > 0 && want(last);
      },
      60000ms, 50ms);
  INFO(what << ": last seen lr " << last.lr << " at " << last.samples << " samples");
  REQUIRE(seen);
  return last;
}

std::unique_ptr<Process> startWorker(const std::string& dir, const std::string& name,
                                     const std::string& device_ms) {
  return std::make_unique<Process>(
      std::vector<std::string>{WORKER_PATH, "--coordinator", endpointIn(dir), "--device-ms",
                               device_ms, "--name", name},
      dir + "/" + name + ".log");
}

// warmup_linear, written out: lr base over 10,000 samples of warm-up, down to 0.01 at 10^6.
double warmupLinear(double base, std::uint64_t s) {
  if (s < 10000) return base * static_cast<double>(s) / 10000.0;
  return base + (0.01 - base) * static_cast<double>(s - 10000) / 990000.0;
}

double cosine(std::uint64_t s) {  // 0.1 down to 0.001 at 40,000 samples, no warm-up
  const double done = std::min(1.0, static_cast<double>(s) / 40000.0);
  return 0.001 + (0.1 - 0.001) * 0.5 * (1 + std::cos(std::numbers::pi * done));
}

// The lr and the position come from one GroupStats: equal up to the wire's float.
bool near(double lr, double expected) { return std::fabs(lr - expected) <= 1e-5 * expected + 1e-7; }

}  // namespace

TEST_CASE("lr schedule: the group PS's lr follows the samples; set optimizer.lr changes its base") {
  const std::string dir = makeTempDir();
  auto daemon = startDaemon(dir, "daemon.log", "tcp://127.0.0.1:0",
                            {"--mode",
                             "sync",
                             "--workers",
                             "1",
                             "--model",
                             "softmax",
                             "--progress-ms",
                             "300",
                             "--heartbeat-ms",
                             "100",
                             "--lr",
                             "0.1",
                             "--lr-schedule",
                             "warmup_linear",
                             "--warmup-samples",
                             "10000",
                             "--schedule-samples",
                             "1000000",
                             "--min-lr",
                             "0.01"});
  auto worker = startWorker(dir, "w0", "4");

  // In the warm-up, then past it: the lr is the schedule's at the samples applied.
  const Observed warm = waitFor(
      dir, [](const Observed& o) { return o.samples > 0 && o.samples < 10000; }, "warm-up");
  CHECK(near(warm.lr, warmupLinear(0.1, warm.samples)));
  CHECK(warm.lr < 0.1);
  const Observed decay = waitFor(
      dir, [](const Observed& o) { return o.samples > 10000; }, "decay");
  CHECK(near(decay.lr, warmupLinear(0.1, decay.samples)));

  // A new base while it trains: the same schedule, three times as high.
  const json set = ctlJson(dir, {"set", "optimizer.lr=0.3"});
  CHECK(set["applied"]["optimizer.lr"].get<double>() == doctest::Approx(0.3));
  CHECK(set["previous"]["optimizer.lr"].get<double>() == doctest::Approx(0.1));
  const Observed raised = waitFor(
      dir, [](const Observed& o) { return o.lr > 0.15; }, "after set optimizer.lr=0.3");
  CHECK(raised.samples > decay.samples);
  CHECK(near(raised.lr, warmupLinear(0.3, raised.samples)));

  // Refused, nothing changed: below min_lr, and a key that needs a restart.
  CHECK(runTool({GROUPSGDCTL_PATH, "--socket", dir + "/ctl.sock", "set", "optimizer.lr=0.001"},
                dir + "/low.log") == 1);
  CHECK(readFile(dir + "/low.log").find("min_lr must be in [0, lr]") != std::string::npos);
  CHECK(runTool({GROUPSGDCTL_PATH, "--socket", dir + "/ctl.sock", "set", "optimizer.kind=sgd"},
                dir + "/kind.log") == 1);
  CHECK(readFile(dir + "/kind.log").find("'optimizer.kind' cannot be changed") !=
        std::string::npos);
  CHECK(observe(dir).lr > 0.15);

  ctlJson(dir, {"shutdown"});
  CHECK(daemon->wait(60000ms) == std::optional<int>(0));
  CHECK(worker->wait(20000ms) == std::optional<int>(0));
  const json s = readSummary(dir);
  CHECK(s["config"]["optimizer"]["schedule"] == "warmup_linear");
  // The configuration as it was at the end: the live lr, not the start one.
  CHECK(s["config"]["optimizer"]["lr"].get<double>() == doctest::Approx(0.3));
  // The summary's group row: the lr of the last step, at the run's final position.
  const json& g = s["group_stats"][0];
  CHECK(g["run_samples"].get<std::uint64_t>() >= raised.samples);
  CHECK(near(g["learning_rate"].get<double>(),
             warmupLinear(0.3, g["run_samples"].get<std::uint64_t>())));
  CHECK(readFile(dir + "/daemon.log").find("  lr 0.") != std::string::npos);  // progress line
  removeTestDir(dir);
}

TEST_CASE("lr schedule: a head restarted from its checkpoint goes on from the run's samples") {
  const std::string dir = makeTempDir();
  const std::vector<std::string> args = {
      "--mode",           "sync",     "--workers",          "1",     "--model",  "softmax",
      "--progress-ms",    "0",        "--heartbeat-ms",     "100",   "--lr",     "0.1",
      "--lr-schedule",    "cosine",   "--schedule-samples", "40000", "--min-lr", "0.001",
      "--checkpoint-dir", dir + "/ck"};
  std::uint64_t applied = 0;
  {
    auto daemon = startDaemon(dir, "d1.log", "tcp://127.0.0.1:0", args);
    auto worker = startWorker(dir, "w1", "2");
    const Observed o = waitFor(
        dir, [](const Observed& x) { return x.samples > 5000; }, "run 1");
    CHECK(near(o.lr, cosine(o.samples)));
    ::kill(daemon->pid(), SIGTERM);  // flush, final checkpoint with its samples
    REQUIRE(daemon->wait(60000ms) == std::optional<int>(0));
    CHECK(worker->wait(20000ms) == std::optional<int>(0));
    applied = readSummary(dir)["samples_applied"].get<std::uint64_t>();
    REQUIRE(applied > 5000);
  }
  std::filesystem::remove(dir + "/endpoint");  // the new head's, not the old one's
  auto daemon = startDaemon(dir, "d2.log", "tcp://127.0.0.1:0", args);
  REQUIRE(waitForText(dir + "/d2.log", "the run had applied " + std::to_string(applied), 10000ms));
  auto worker = startWorker(dir, "w2", "2");
  // Its first steps are at the old run's position, not at 0 (an answer before its first
  // GroupConfig still shows the start lr: wait for a step of this run).
  const Observed o = waitFor(
      dir, [applied](const Observed& x) { return x.samples > applied; }, "run 2");
  CHECK(o.samples < applied + 20000);
  CHECK(near(o.lr, cosine(o.samples)));
  CHECK(o.lr < cosine(1000));  // from 0 it would be (almost) the full 0.1
  ctlJson(dir, {"shutdown"});
  CHECK(daemon->wait(60000ms) == std::optional<int>(0));
  CHECK(worker->wait(20000ms) == std::optional<int>(0));
  removeTestDir(dir);
}
