// Fault test (label `faults`): the evaluator killed with SIGKILL mid-run. The
// daemon must report the loss at once (event, progress line, status), training
// goes on unmeasured, and a replacement evaluator picks measurement up so the
// run reaches its target.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "daemon_harness.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

TEST_CASE(
    "faults: the evaluator killed with SIGKILL is reported at once; a "
    "replacement resumes measuring and the run reaches its target") {
  const std::string dir = makeTempDir();
  // Dead after max(250 ms * 8, 1000 + 2 * 250) = 2 s of silence.
  constexpr double kDeadAfterS = 2.0;
  constexpr double kTarget = 0.80;
  // The target is set only once the evaluator is gone, so it cannot be reached
  // before.
  auto daemon =
      startDaemon(dir, "daemon.log", "tcp://127.0.0.1:0",
                  {"--mode", "grouped", "--workers", "4", "--groups", "2", "--heartbeat-ms", "250",
                   "--heartbeat-misses", "8", "--step-deadline-ms", "1000", "--progress-ms", "250",
                   "--target-acc", "0.99", "--max-seconds", "150"});
  const std::string ep = endpointIn(dir);
  auto evaluator = [&](const std::string& log) {
    return std::make_unique<Process>(
        std::vector<std::string>{WORKER_PATH, "--coordinator", ep, "--evaluate", "--name",
                                 "evaluator", "--eval-interval-ms", "200"},
        dir + "/" + log);
  };
  auto eval1 = evaluator("evaluator-1.log");
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 4; ++i) {
    workers.push_back(std::make_unique<Process>(
        std::vector<std::string>{WORKER_PATH, "--coordinator", ep, "--name",
                                 "w" + std::to_string(i), "--device-ms", "2"},
        dir + "/w" + std::to_string(i) + ".log"));
  }
  // Mid-run: the evaluator has measured a trained model.
  json st = waitForStatus(
      dir,
      [](const json& s) {
        return s["test_acc"].is_number() && s["samples_trained"].get<std::uint64_t>() > 2000;
      },
      90000ms);
  REQUIRE(st["test_acc"].is_number());
  CHECK(st["evaluation"]["state"] == "measuring");
  CHECK(st["evaluation"]["evaluators_active"] == 1);
  std::string eval_id;
  const json rows = ctl(dir, {"workers"});
  REQUIRE(rows.is_object());
  for (const auto& w : rows["workers"]) {
    if (w["role"] == "evaluator") eval_id = std::to_string(w["id"].get<std::uint64_t>());
    // Group, batch and step times belong to trainers: null (a "-" in the table) elsewhere.
    const bool trainer = w["role"] == "trainer";
    CHECK(w["group"].is_null() != trainer);
    CHECK(w["batch"].is_null() != trainer);
    CHECK(w["compute_ms"].is_null() != trainer);
  }
  REQUIRE(!eval_id.empty());
  const std::size_t log_at_kill = readFile(dir + "/daemon.log").size();
  const double killed_at = wallNow();
  REQUIRE(::kill(eval1->pid(), SIGKILL) == 0);
  REQUIRE(eval1->wait(10000ms).has_value());

  // Reported: status, the event on the progress output, the log line naming the
  // role.
  st = waitForStatus(
      dir, [](const json& s) { return s["evaluation"]["state"] == "lost"; }, 30000ms);
  const double detected = wallNow() - killed_at;
  INFO("daemon: " << readFile(dir + "/daemon.log"));
  REQUIRE(st["evaluation"]["state"] == "lost");
  CHECK(st["evaluation"]["accuracy_measured"] == false);
  CHECK(st["evaluation"]["evaluators_lost"] == 1);
  CHECK(st["workers"]["active"] == 4);                      // trainers are untouched
  const double acc_at_kill = st["test_acc"].get<double>();  // the last one measured
  REQUIRE(waitForText(dir + "/daemon.log", "accuracy no longer measured", 5000ms));
  const std::string log = readFile(dir + "/daemon.log");
  CHECK(log.find("evaluator_lost: evaluator ", log_at_kill) != std::string::npos);
  CHECK(log.find("evaluator " + eval_id + " missed its heartbeats: declared dead", log_at_kill) !=
        std::string::npos);
  CHECK(log.find("worker " + eval_id + " missed", log_at_kill) == std::string::npos);
  const double event_at = stampOf(log, "evaluator_lost", log_at_kill) - killed_at;
  // Training goes on unmeasured, and the progress line says so.
  const auto samples = st["samples_trained"].get<std::uint64_t>();
  st = waitForStatus(
      dir,
      [&](const json& s) { return s["samples_trained"].get<std::uint64_t>() > samples + 2000; },
      60000ms);
  CHECK(st["samples_trained"].get<std::uint64_t>() > samples + 2000);
  CHECK(st["test_acc"].get<double>() == acc_at_kill);
  REQUIRE(waitForText(dir + "/daemon.log", ": evaluator lost)", 5000ms));

  // A replacement (as the demo's supervisor or systemd would start) resumes
  // measuring.
  const double restarted_at = wallNow();
  auto eval2 = evaluator("evaluator-2.log");
  REQUIRE(waitForText(dir + "/daemon.log", "evaluator_back", 30000ms));
  const double back_at = stampOf(readFile(dir + "/daemon.log"), "evaluator_back") - restarted_at;
  REQUIRE(waitForStatus(
              dir, [](const json& s) { return s["evaluation"]["state"] == "measuring"; },
              10000ms)["evaluation"]["state"] == "measuring");
  // Killed again and restarted at once under the same name: the restart itself
  // tells the daemon the old process is gone, well before its heartbeat limit.
  const std::size_t log_at_second = readFile(dir + "/daemon.log").size();
  REQUIRE(::kill(eval2->pid(), SIGKILL) == 0);
  REQUIRE(eval2->wait(10000ms).has_value());
  // A fixed time on purpose (the behaviour under test): longer than a heartbeat period,
  // it has gone quiet.
  std::this_thread::sleep_for(400ms);
  const double second_kill_restart = wallNow();
  auto eval3 = evaluator("evaluator-3.log");
  REQUIRE(waitForText(dir + "/daemon.log", "of the same name", 30000ms));
  const double replaced_after =
      stampOf(readFile(dir + "/daemon.log"), "of the same name", log_at_second) -
      second_kill_restart;
  CHECK(replaced_after < kDeadAfterS);
  // Only now is the target set, so the last replacement is what reaches it.
  json set = ctl(dir, {"set", "target_acc=" + std::to_string(kTarget)});
  REQUIRE(set.is_object());
  REQUIRE(daemon->wait(150000ms) == std::optional<int>(0));
  CHECK(eval3->wait(15000ms) == std::optional<int>(0));
  for (int i = 0; i < 4; ++i) {
    CHECK_MESSAGE(workers[i]->wait(20000ms) == std::optional<int>(0),
                  "w" << i << ": " << readFile(dir + "/w" + std::to_string(i) + ".log"));
  }
  json s = readSummary(dir);
  INFO("summary: " << s.dump());
  CHECK(s["reached"] == true);
  CHECK(s["final_test_acc"].get<double>() >= kTarget - 0.1);
  checkAccounting(s);
  const json& ev = s["evaluation"];
  CHECK(ev["evaluators_registered"] == 3);
  CHECK(ev["evaluators_lost"] == 2);
  CHECK(ev["replacements"] == 2);
  REQUIRE(ev["gaps"].size() == 2);
  CHECK(ev["gaps"][0]["last_accuracy"].get<double>() == doctest::Approx(acc_at_kill));
  const double gap = ev["gaps"][0]["unmeasured_s"].get<double>();
  // Silence counts from the last heartbeat (up to one evaluation before the
  // kill).
  CHECK(event_at >= kDeadAfterS - 1.0);
  CHECK(event_at < kDeadAfterS + 3.0);
  std::printf(
      "faults: evaluator SIGKILL at accuracy %.4f: declared lost %.2f "
      "s later (limit "
      "%.1f s; status showed it %.2f s after the kill); replacement "
      "measuring %.2f s "
      "after its start; %.2f s unmeasured; a second kill + immediate "
      "restart reported "
      "%.2f s after the restart; target %.2f reached at %.1f s, final "
      "accuracy %.4f; trained %llu samples, accounting ok %d\n",
      acc_at_kill, event_at, kDeadAfterS, detected, back_at, gap, replaced_after, kTarget,
      s["time_to_target_s"].get<double>(), s["final_test_acc"].get<double>(),
      llu(s["samples_trained"]), s["accounting_ok"].get<bool>() ? 1 : 0);
  reportDone(dir);
}
