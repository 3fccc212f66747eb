// Process tests of the adaptive coordinator: real daemon and workers on loopback.
#include <doctest/doctest.h>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "daemon_harness.h"
#include "worker_run.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

struct Run : WorkerRun {
  Run(const json& config, std::vector<std::string> flags) {
    {
      std::ofstream f(dir + "/config.json");
      f << config.dump(2);
    }
    flags.insert(flags.begin(), {"--config", dir + "/config.json", "--progress-ms", "0"});
    start(std::move(flags), DaemonFiles{.control_socket = false});
  }
  Process& worker(const std::vector<std::string>& extra) {
    return addWorker(withArgs({"--log-level", "warn"}, extra));
  }
  json finish(std::chrono::milliseconds timeout, std::size_t expect_clean = ~0u) {
    return WorkerRun::finish(timeout, 15000ms, expect_clean);
  }
};

}  // namespace

TEST_CASE(
    "adaptive: a worker that slows 1x -> 4x is moved to its own group, and back when it recovers") {
  // A minimum batch of 24 means a 4x slower worker cannot be fixed by its batch alone
  // (it would need about 10 samples), so grouping is the right answer for it. Device time
  // dominates the step so timing noise on a busy machine does not decide the outcome.
  json cfg = {{"mode", "adaptive"},
              {"workers", 4},
              {"heartbeat_ms", 150},
              {"adaptive",
               {{"control_ms", 300},
                {"min_batch", 24},
                {"min_gain", 0.05},
                {"staleness_penalty", 0.3},
                {"min_regroup_interval_ms", 1500},
                {"estimator_window", 8}}}};
  Run r(cfg, {"--max-seconds", "17"});
  r.worker({"--device-ms", "30", "--name", "slow", "--schedule", "3s:slowdown=4,10s:slowdown=1"});
  for (int i = 0; i < 3; ++i) r.worker({"--device-ms", "30", "--name", "w" + std::to_string(i)});
  json s = r.finish(60000ms);
  INFO("summary: " << s.dump());
  INFO("daemon: " << readFile(r.dir + "/daemon.log"));
  std::vector<json> regroups;
  for (const auto& e : s["events"]) {
    if (e["kind"] == "regroup") regroups.push_back(e);
  }
  REQUIRE(regroups.size() >= 2);
  // The first regroup after the slowdown isolates the straggler within a bounded time...
  bool isolated = false, rejoined = false;
  double isolated_at = 0;
  for (const auto& e : regroups) {
    const std::string text = e["text"];
    const double t = e["t_s"];
    if (!isolated && t > 3.0 && text.find("G=2") != std::string::npos) {
      isolated = true;
      isolated_at = t;
    } else if (isolated && t > 10.0 && text.find("G=1") != std::string::npos) {
      rejoined = true;
    }
  }
  CHECK(isolated);
  CHECK(isolated_at < 3.0 + 5.0);
  CHECK(rejoined);              // ...and back into one group once it has recovered
  CHECK(regroups.size() <= 5);  // no thrash in between
  // Each trainer kept its id through its moves: a heartbeat sent with the old epoch before
  // the old group told it of the move must not make it register anew (a new id, its old
  // registration closed as "left").
  std::map<std::string, int> trainers;
  for (const auto& w : s["worker_stats"]) trainers[w["name"].get<std::string>()] += 1;
  CHECK(trainers.size() == 4);
  for (const auto& [name, n] : trainers)
    CHECK_MESSAGE(n == 1, name << " registered " << n << " times");
  checkAccounting(s);
}

TEST_CASE(
    "adaptive: batches follow speed inside a group (a 3x slower worker gets a smaller batch)") {
  json cfg = {{"mode", "adaptive"},
              {"workers", 3},
              {"heartbeat_ms", 150},
              {"adaptive", {{"control_ms", 300}, {"min_batch", 4}}}};
  Run r(cfg, {"--max-seconds", "8"});
  // Emulated device time dominates each step, so a loaded machine's noise in the real
  // compute (tens of ms at a load of 10 on 2 cores) does not make "a" or "b" look slow.
  r.worker({"--device-ms", "40", "--name", "slow", "--slowdown", "3"});
  r.worker({"--device-ms", "40", "--name", "a"});
  r.worker({"--device-ms", "40", "--name", "b"});
  json s = r.finish(60000ms);
  INFO("summary: " << s.dump());
  std::map<std::string, int> batch;
  for (const auto& w : s["worker_stats"]) batch[w["name"]] = w["batch"];
  CHECK(batch["slow"] < 20);
  CHECK(batch["a"] > 36);
  CHECK(batch["slow"] + batch["a"] + batch["b"] == 96);  // the group total is kept
  CHECK(s["regroups"].get<int>() == 0);                  // a batch fixes it; no regroup
  checkAccounting(s);
}

TEST_CASE("process: a killed worker is declared dead and its group carries on") {
  const std::string ctl_dir = makeTempDir();
  const std::string sock = ctl_dir + "/ctl.sock";
  Run r(json{{"mode", "grouped"},
             {"workers", 3},
             {"groups", 1},
             {"heartbeat_ms", 200},
             {"step_deadline_ms", 300}},
        {"--max-seconds", "8", "--control-socket", sock});
  r.worker({"--device-ms", "5", "--name", "a"});
  r.worker({"--device-ms", "5", "--name", "b"});
  Process& victim = r.worker({"--device-ms", "5", "--name", "victim", "--log-level", "info"});
  // Kill it once it trains: registered, then some answered pushes (polled, not slept).
  REQUIRE(waitForText(r.dir + "/worker-2.log", "assigned:", 20000ms));
  CHECK(waitUntil(
      [&] {
        const json rows = ctl(ctl_dir, {"workers"});
        if (!rows.is_object() || !rows.contains("workers")) return false;
        for (const auto& w : rows["workers"]) {
          if (w["name"] == "victim" && w["steps"].get<std::uint64_t>() >= 20) return true;
        }
        return false;
      },
      20000ms, 100ms));
  ::kill(victim.pid(), SIGKILL);
  CHECK(victim.wait(5000ms) == std::optional<int>(-SIGKILL));
  json s = r.finish(60000ms, /*expect_clean=*/2);
  INFO("summary: " << s.dump());
  bool death = false;
  double died_at = 0;
  for (const auto& e : s["events"]) {
    if (e["kind"] == "death" && !death) {  // the victim's; others may die at the stop
      death = true;
      died_at = e["t_s"];
    }
  }
  CHECK(death);
  std::uint64_t a_steps = 0, victim_steps = 0;
  for (const auto& w : s["worker_stats"]) {
    if (w["name"] == "a") a_steps = w["steps"];
    if (w["name"] == "victim") {
      victim_steps = w["steps"];
      CHECK(w["state"] == "dead");
    }
  }
  CHECK(died_at < 8.0);
  CHECK(a_steps > victim_steps + 50);  // the group kept stepping after the death
  // What the dead worker trained is what its group acknowledged: nothing is unaccounted.
  CHECK(s["samples_trained_by_dead_workers"].get<std::uint64_t>() > 0);
  checkAccounting(s);
  removeTestDir(ctl_dir);
}

namespace {
// An adaptive run of 3 trainers with compress_gradients auto (threshold MBIT), each trainer
// with `link_ms` of emulated link delay per push, for `seconds`; returns the summary and
// sets *log to the trainers' logs (at level info: they say when they switch).
json compressionAutoRun(double mbit, const std::string& link_ms, const std::string& seconds,
                        std::string* log) {
  json cfg = {{"mode", "adaptive"},
              {"workers", 3},
              {"heartbeat_ms", 150},
              {"compress_gradients", "auto"},
              {"compression_auto_mbit", mbit},
              {"adaptive", {{"control_ms", 300}}}};
  Run r(cfg, {"--max-seconds", seconds});
  for (int i = 0; i < 3; ++i) {
    r.addWorker({"--log-level", "info", "--device-ms", "5", "--link-ms", link_ms, "--name",
                 "w" + std::to_string(i)});
  }
  json s = r.finish(90000ms);
  log->clear();
  for (std::size_t i = 0; i < 3; ++i) *log += readFile(r.workerLog(i));
  return s;
}
}  // namespace

TEST_CASE(
    "adaptive: compress_gradients auto tries fp16 on a slow link, drops it where the link is "
    "latency-bound, and leaves a fast one dense") {
  // 30 ms per push whatever its bytes (--link-ms): it measures far below 100000 Mbit/s, so
  // fp16 is tried; the round trip does not shrink with it, so the group goes back to dense
  // for good. A member's windows start at its 10th step and last 20 steps: the trial is
  // judged after about 50 steps. (A bandwidth-limited link keeps fp16:
  // scripts/bench/ashl_netns.sh.)
  std::string log;
  const json slow = compressionAutoRun(100000, "30", "20", &log);
  INFO("summary: " << slow.dump());
  INFO("trainers: " << log);
  const json& sc = slow["gradient_compression"];
  CHECK(sc["mode"] == "auto");
  CHECK(sc["threshold_mbit"] == 100000);
  std::size_t measured = 0, latency_bound = 0;
  for (const auto& g : sc["groups"]) {
    if (g["link_mbit"].is_null()) continue;  // a group left empty
    ++measured;
    CHECK(g["link_mbit"].get<double>() < 100000);
    CHECK(g["compression_switches"].get<int>() >= 1);  // tried
    CHECK(g["compression_phase"] != "fp16");           // never kept on a fixed delay
    if (g["compression_phase"] == "dense (latency-bound)") {
      ++latency_bound;
      CHECK(g["compression"] == "dense");
      CHECK(g["compression_switches"] == 2);
    }
  }
  CHECK(measured >= 1);
  CHECK(latency_bound >= 1);
  // The trainers followed: switched to fp16 and back.
  CHECK(log.find("gradient compression dense -> fp16") != std::string::npos);
  CHECK(log.find("gradient compression fp16 -> dense") != std::string::npos);
  checkAccounting(slow);
  // Loopback with no delay and a threshold of 1 Mbit/s: dense everywhere, never tried.
  const json fast = compressionAutoRun(1, "0", "6", &log);
  INFO("summary: " << fast.dump());
  for (const auto& g : fast["gradient_compression"]["groups"]) {
    CHECK(g["compression"] == "dense");
    CHECK(g["compression_switches"] == 0);
  }
  CHECK(log.find("gradient compression dense -> fp16") == std::string::npos);
  checkAccounting(fast);
}
