// A multi-job daemon (groupsgdd --serve) whose jobs' group PSes live on node daemons
// (docs/jobs.md, "Node daemons"): the daemon runs no group PS of its own
// (--max-group-slots 0); two node daemons offer three slots. Two jobs train on them at
// once, a submit beyond the free slots is refused with the reason, a job stopped gives
// its node slots back and a third job then trains on them.
#include <doctest/doctest.h>

#include <csignal>
#include <fstream>

#include "daemon_harness.h"
#include "job_worker.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

std::unique_ptr<Process> startServe(const std::string& dir) {
  auto d =
      startDaemon(dir, "daemon.log",
                  {"--serve", "--state-dir", dir + "/state", "--max-group-slots", "0",
                   "--progress-ms", "0", "--heartbeat-ms", "200", "--step-deadline-ms", "2000"},
                  DaemonFiles{});
  REQUIRE(waitForText(dir + "/daemon.log", "serving jobs", 30000ms));
  return d;
}

std::unique_ptr<Process> startNode(const std::string& dir, const std::string& name, int slots) {
  return std::make_unique<Process>(
      std::vector<std::string>{groupsgddPath(), "--role", "node", "--coordinator", endpointIn(dir),
                               "--node-groups", std::to_string(slots), "--give-up-s", "30"},
      dir + "/" + name + ".log");
}

std::unique_ptr<Process> startWorker(const std::string& dir, const std::string& job,
                                     const std::string& name, bool evaluate = false) {
  return startJobWorker(dir, endpointIn(dir), job, name, evaluate);
}

json softmaxJob(const std::string& name, const std::string& mode, double target) {
  return groupsgd::testing::softmaxJob(name, mode, target, 60);
}

std::string writeJob(const std::string& dir, const json& job) {
  const std::string path = dir + "/" + job["name"].get<std::string>() + ".json";
  std::ofstream(path) << job.dump(2);
  return path;
}

// A submit expected to be refused: its output.
std::string refusedSubmit(const std::string& dir, const json& job) {
  static int n = 0;
  const std::string log = dir + "/refused-" + std::to_string(++n) + ".log";
  CHECK(runTool(
            {groupsgdctlPath(), "--socket", dir + "/ctl.sock", "job", "submit", writeJob(dir, job)},
            log, 30000ms) != 0);
  return readFile(log);
}

json slots(const std::string& dir) { return ctlJson(dir, {"job", "list"})["group_slots"]; }

std::string jobState(const std::string& dir, const std::string& name) {
  const json list = ctlJson(dir, {"job", "list"});
  for (const auto& row : list["jobs"]) {
    if (row["name"] == name) return row["state"];
  }
  return "";
}

// The job's summary, its groups served by node daemons (at least this many offers), its
// accounting whole.
json checkedSummary(const std::string& dir, const std::string& job, std::size_t node_offers) {
  const json s = ctlJson(dir, {"job", "summary", job});
  INFO(job, ": ", s.dump());
  std::size_t offers = 0;
  for (const auto& e : s["events"]) {
    if (e["kind"] == "node") ++offers;
  }
  CHECK(offers >= node_offers);
  CHECK(s["accounting_ok"] == true);
  CHECK(s["samples_trained"].get<std::uint64_t>() > 0);
  return s;
}

}  // namespace

TEST_CASE(
    "serve with node daemons: jobs train on the nodes' slots, refused beyond them, a "
    "stopped job's slots go to the next") {
  const std::string dir = makeTempDir();
  auto daemon = startServe(dir);
  auto node_a = startNode(dir, "node-a", 2);
  auto node_b = startNode(dir, "node-b", 1);
  REQUIRE(waitUntil([&] { return slots(dir)["node_slots"] == 3; }, 30000ms, 100ms));
  CHECK(slots(dir)["nodes"].size() == 2);

  // a (sync: 1 slot) and b (grouped: 2) take all three; c finds none free.
  const json a = ctlJson(dir, {"job", "submit", writeJob(dir, softmaxJob("a", "sync", 0.75))});
  CHECK(a["node_slots"] == 1);
  const json b = ctlJson(dir, {"job", "submit", writeJob(dir, softmaxJob("b", "grouped", 0))});
  CHECK(b["node_slots"] == 2);
  CHECK(slots(dir)["free"] == 0);
  const std::string full = refusedSubmit(dir, softmaxJob("c", "grouped", 0.75));
  CHECK_MESSAGE(full.find("needs 2 group PS(es), 0 are free (0 of max_group_slots 0 here, 0 of 3 "
                          "on 2 node daemon(s))") != std::string::npos,
                full);

  std::vector<std::unique_ptr<Process>> workers;
  for (const std::string job : {"a", "b"}) {
    workers.push_back(startWorker(dir, job, job + "-w1"));
    workers.push_back(startWorker(dir, job, job + "-w2"));
  }
  workers.push_back(startWorker(dir, "a", "a-eval", true));
  REQUIRE(waitUntil([&] { return jobState(dir, "a") == "finished"; }, 60000ms, 300ms));
  const json sa = checkedSummary(dir, "a", 1);
  CHECK(sa["acc_at_target"].get<double>() >= 0.75);
  // b trains on; a's slot is free again, still one short of c's two.
  CHECK(slots(dir)["free"] == 1);
  const std::string short_one = refusedSubmit(dir, softmaxJob("c", "grouped", 0.75));
  CHECK(short_one.find("needs 2 group PS(es), 1 are free") != std::string::npos);
  CHECK(ctlJson(dir, {"--job", "b", "status"})["central_version"].get<std::uint64_t>() > 0);

  // b stopped (without draining): its two node slots are free, and c trains on them.
  ctlJson(dir, {"job", "stop", "b"});
  REQUIRE(waitUntil([&] { return jobState(dir, "b") == "stopped"; }, 30000ms, 200ms));
  checkedSummary(dir, "b", 2);
  CHECK(slots(dir)["free"] == 3);
  const json c = ctlJson(dir, {"job", "submit", writeJob(dir, softmaxJob("c", "grouped", 0.75))});
  CHECK(c["node_slots"] == 2);
  workers.push_back(startWorker(dir, "c", "c-w1"));
  workers.push_back(startWorker(dir, "c", "c-w2"));
  workers.push_back(startWorker(dir, "c", "c-eval", true));
  REQUIRE(waitUntil([&] { return jobState(dir, "c") == "finished"; }, 60000ms, 300ms));
  const json sc = checkedSummary(dir, "c", 1);
  CHECK(sc["acc_at_target"].get<double>() >= 0.75);
  for (auto& w : workers) CHECK(w->wait(30000ms) == std::optional<int>(0));
  CHECK(slots(dir)["in_use"] == 0);

  // The nodes stay in the pool between jobs; SIGTERM ends them and the daemon cleanly.
  CHECK(slots(dir)["node_slots"] == 3);
  for (auto* n : {node_a.get(), node_b.get()}) {
    ::kill(n->pid(), SIGTERM);
    CHECK(n->wait(30000ms) == std::optional<int>(0));
  }
  REQUIRE(waitUntil([&] { return slots(dir)["node_slots"] == 0; }, 10000ms, 100ms));
  ::kill(daemon->pid(), SIGTERM);
  CHECK(daemon->wait(30000ms) == std::optional<int>(0));
}
