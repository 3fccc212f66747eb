// Fault tests on real processes (docs/reliability.md): a worker frozen with SIGSTOP for
// longer than the heartbeat timeout and then resumed, and malformed or out-of-place
// messages sent while training runs. Each prints the figures docs/reliability.md quotes
// ("fault: ..." lines; ctest -V or the test log shows them).
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
#include "groupsgd/common/log.h"
#include "worker_run.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

double lastStampOf(const std::string& log, const std::string& text) {
  const std::size_t at = log.rfind(text);
  if (at == std::string::npos) return -1;
  const std::size_t start = log.rfind('\n', at);
  return groupsgd::log::lineSeconds(log.c_str() + (start == std::string::npos ? 0 : start + 1));
}

// The first whole line of `log` holding `text` ("" if none).
std::string lineWith(const std::string& log, const std::string& text) {
  const std::size_t at = log.find(text);
  if (at == std::string::npos) return "";
  const std::size_t start = log.rfind('\n', at);
  const std::size_t end = log.find('\n', at);
  return log.substr(start == std::string::npos ? 0 : start + 1,
                    end == std::string::npos ? std::string::npos
                                             : end - (start == std::string::npos ? 0 : start + 1));
}

std::size_t countOf(const std::string& log, const std::string& text) {
  std::size_t n = 0;
  for (std::size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++n;
  return n;
}

struct FaultCluster : WorkerRun {
  explicit FaultCluster(std::vector<std::string> daemon_args) {
    daemon_args.insert(daemon_args.begin(), {"--progress-ms", "0"});
    start(std::move(daemon_args), DaemonFiles{"tcp://127.0.0.1:0", true});
  }
  ~FaultCluster() {
    for (auto& w : workers) ::kill(w->pid(), SIGCONT);  // never leave a stopped child behind
  }
  // Worker I is named wI.
  Process& addWorker(const std::vector<std::string>& extra) {
    return WorkerRun::addWorker(withArgs({"--name", "w" + std::to_string(workers.size())}, extra));
  }
  // groupsgdctl --json status, parsed.
  json status() { return ctlJson(dir, {"status"}); }
  // Waits until the daemon's trainers have reported more than `samples` samples.
  bool waitForSamples(std::uint64_t samples, std::chrono::milliseconds timeout) {
    return waitUntil([&] { return status()["samples_trained"].get<std::uint64_t>() > samples; },
                     timeout, 200ms);
  }
  // SIGTERM, then the summary; every worker must exit 0.
  json stop() {
    ::kill(daemon->pid(), SIGTERM);
    return finish(90000ms, 20000ms);
  }
};

}  // namespace

TEST_CASE(
    "fault: a worker frozen past the heartbeat timeout is declared dead, refused on its return, "
    "re-registers; training and accounting go on") {
  // Dead after max(heartbeat_ms * misses, step_deadline_ms + 2 * heartbeat_ms) of silence
  // (coordinator.cc checkLiveness): here max(900, 1100) = 1.1 s.
  constexpr double kDeadAfterS = 1.1;
  FaultCluster c({"--mode", "grouped", "--workers", "4", "--groups", "2", "--heartbeat-ms", "300",
                  "--heartbeat-misses", "3", "--step-deadline-ms", "500"});
  for (int i = 0; i < 4; ++i) c.addWorker({"--device-ms", "2"});
  REQUIRE(waitForText(c.dir + "/daemon.log", "registered trainer 4", 30000ms));
  REQUIRE(c.waitForSamples(2000, 60000ms));
  // Freeze w1 for three times the dead limit.
  Process& frozen = *c.workers[1];
  const std::string wlog = c.workerLog(1);
  const std::size_t assigned_before = countOf(readFile(wlog), "assigned: group");
  const double stopped_at = wallNow();
  REQUIRE(::kill(frozen.pid(), SIGSTOP) == 0);
  const bool declared =
      waitForText(c.dir + "/daemon.log", "missed its heartbeats: declared dead", 15000ms);
  INFO("daemon: " << readFile(c.dir + "/daemon.log"));
  REQUIRE(declared);
  const double dead_after = stampOf(readFile(c.dir + "/daemon.log"), "declared dead") - stopped_at;
  json during = c.status();
  CHECK(during["workers"]["dead"] == 1);
  CHECK(during["workers"]["active"] == 3);
  // The other three keep training while w1 is frozen.
  const auto samples_frozen = during["samples_trained"].get<std::uint64_t>();
  REQUIRE(c.waitForSamples(samples_frozen + 1000, 30000ms));
  const double sleep_left = 3 * kDeadAfterS - (wallNow() - stopped_at);
  // Frozen for a fixed time on purpose (the behaviour under test): 3x the dead-after limit.
  if (sleep_left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(sleep_left));
  const double frozen_for = wallNow() - stopped_at;
  const std::size_t log_at_resume = readFile(wlog).size();
  REQUIRE(::kill(frozen.pid(), SIGCONT) == 0);
  const double resumed_at = wallNow();
  // Its next push or heartbeat is refused; it closes the old registration and registers
  // again as a new worker.
  waitUntil([&] { return countOf(readFile(wlog), "assigned: group") > assigned_before; }, 30000ms,
            20ms);
  const std::string after = readFile(wlog);
  INFO("worker 1: " << after);
  REQUIRE(countOf(after, "assigned: group") == assigned_before + 1);
  const double reregistered_after = lastStampOf(after, "assigned: group") - resumed_at;
  // What told it: a refused push (logged) or a heartbeat answered "register again".
  const std::string refusal =
      lineWith(after.substr(std::min(log_at_resume, after.size())), "failed: ");
  // The returning worker trains again, and the total keeps growing.
  REQUIRE(c.waitForSamples(c.status()["samples_trained"].get<std::uint64_t>() + 1000, 30000ms));
  CHECK(c.status()["workers"]["active"] == 4);
  json s = c.stop();
  checkAccounting(s);
  bool death_event = false;
  for (const auto& e : s["events"]) death_event |= e["kind"] == "death";
  CHECK(death_event);
  std::uint64_t frozen_samples = 0;
  for (const auto& w : s["worker_stats"]) {
    if (w["name"] == "w1" && w["state"] != "active")
      frozen_samples += w["samples"].get<std::uint64_t>();
  }
  // The figures docs/reliability.md quotes.
  std::printf(
      "fault: SIGSTOP w1 for %.2f s; declared dead %.2f s after SIGSTOP (limit %.1f s); "
      "re-registered %.2f s after SIGCONT; refusal: %s\n"
      "fault: summary samples_trained %llu applied %llu dropped %llu late_gradients %llu "
      "stale_heartbeats %llu bad_messages %llu; w1's first registration closed with %llu samples\n",
      frozen_for, dead_after, kDeadAfterS, reregistered_after,
      refusal.empty() ? "(none: a heartbeat was answered reregister)" : refusal.c_str(),
      llu(s["samples_trained"]), llu(s["samples_applied"]), llu(s["samples_dropped"]),
      llu(s["late_gradients"]), llu(s["stale_heartbeats"]), llu(s["bad_messages"]),
      static_cast<unsigned long long>(frozen_samples));
  std::fflush(stdout);
  // Silence counts from the last heartbeat the coordinator saw, which left the worker up
  // to one heartbeat interval (0.3 s) before SIGSTOP.
  CHECK(dead_after >= kDeadAfterS - 0.3 - 0.05);
  CHECK(dead_after < kDeadAfterS + 2.0);
  CHECK(reregistered_after < 5.0);
}

TEST_CASE(
    "fault: malformed and out-of-place messages during training each get an error reply; training "
    "goes on") {
  FaultCluster c({"--mode", "grouped", "--workers", "2", "--groups", "1", "--heartbeat-ms", "300"});
  for (int i = 0; i < 2; ++i) c.addWorker({"--device-ms", "2"});
  REQUIRE(waitForText(c.dir + "/daemon.log", "registered trainer 2", 30000ms));
  REQUIRE(c.waitForSamples(1000, 60000ms));
  // Every probe of groupsgd-probe: a non-Cap'n Proto header, a wrong-length and a NaN
  // gradient, protocol version 2 (group PS and coordinator), another job's id, a tensor
  // frame longer than declared, an unknown worker id (push and leave), a future step,
  // a replayed push (the same step again) and an out-of-order one (an older step).
  Process probe({PROBE_PATH, c.endpoint, "all"}, c.dir + "/probe.log");
  const auto probe_rc = probe.wait(60000ms);
  const std::string report = readFile(c.dir + "/probe.log");
  INFO("probe: " << report);
  CHECK(probe_rc == std::optional<int>(0));
  CHECK(countOf(report, " refused (") == 12);
  CHECK(countOf(report, "NOT REFUSED") == 0);
  std::printf("%s", report.c_str());
  // Training goes on after all of it.
  const auto samples = c.status()["samples_trained"].get<std::uint64_t>();
  REQUIRE(c.waitForSamples(samples + 1000, 30000ms));
  json s = c.stop();
  checkAccounting(s);
  CHECK(s["bad_messages"].get<std::uint64_t>() >= 12);
  CHECK(s["replayed_pushes"].get<std::uint64_t>() == 2);
  std::printf("fault: probes refused 12/12; summary bad_messages %llu, samples_trained %llu\n",
              llu(s["bad_messages"]), llu(s["samples_trained"]));
}

TEST_CASE(
    "fault: a push counted by its group whose answer times out on the worker keeps the accounting "
    "exact") {
  // One group of two: w0's pushes wait at the barrier for w1, whose steps 30-32 take
  // 1.5 s each, far past w0's --timeout-ms (400 ms). The group PS counts w0's gradient on
  // arrival; w0 sees no answer, reports the samples as unconfirmed, asks the coordinator,
  // pulls again (and, when it pulled before the step closed, its next push is a replay:
  // it leaves and registers anew). Before the reconciliation the summary was short by
  // one batch per such push (accounting_ok false).
  FaultCluster c({"--mode", "grouped", "--workers", "2", "--groups", "1", "--heartbeat-ms", "500",
                  "--heartbeat-misses", "20", "--step-deadline-ms", "6000"});
  c.addWorker({"--device-ms", "2", "--timeout-ms", "400"});
  c.addWorker({"--device-ms", "2", "--schedule", "30:device-ms=1500,33:device-ms=2"});
  const std::string wlog = c.workerLog(0);
  const bool timed_out = waitForText(wlog, "no answer from", 60000ms);
  INFO("w0: " << readFile(wlog));
  REQUIRE(timed_out);
  // Training goes on after w1's slow steps.
  REQUIRE(c.waitForSamples(c.status()["samples_trained"].get<std::uint64_t>() + 1000, 60000ms));
  json s = c.stop();
  checkAccounting(s);
  CHECK(s["worker_reports_ok"].get<bool>());
  CHECK(s["samples_counted_unanswered"].get<std::uint64_t>() > 0);
  std::printf(
      "fault: push answers timed out: %zu in w0's log; the groups counted %llu samples "
      "whose answer w0 never saw; trained %llu = applied %llu + dropped %llu\n",
      countOf(readFile(wlog), "no answer from"), llu(s["samples_counted_unanswered"]),
      llu(s["samples_trained"]), llu(s["samples_applied"]), llu(s["samples_dropped"]));
  std::fflush(stdout);
}
