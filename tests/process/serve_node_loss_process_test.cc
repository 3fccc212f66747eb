// A multi-job daemon's node daemon killed mid-job (docs/jobs.md, "Node daemons"): the
// job's coordinator fails the group it served as for a single run, the daemon drops the
// node from its pool, the job trains on, and the slot it lost is placed again on a node
// that joins later, where its group is re-created. The accounting holds.
#include <doctest/doctest.h>

#include <csignal>
#include <fstream>

#include "daemon_harness.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

std::unique_ptr<Process> startNode(const std::string& dir, const std::string& name) {
  return std::make_unique<Process>(
      std::vector<std::string>{groupsgddPath(), "--role", "node", "--coordinator", endpointIn(dir),
                               "--node-groups", "1", "--give-up-s", "30"},
      dir + "/" + name + ".log");
}

json slots(const std::string& dir) { return ctlJson(dir, {"job", "list"})["group_slots"]; }

std::uint64_t version(const std::string& dir) {
  return ctlJson(dir, {"--job", "g", "status"})["central_version"].get<std::uint64_t>();
}

}  // namespace

TEST_CASE(
    "serve with node daemons: a node killed mid-job fails its group; the job trains on "
    "and its lost slot is placed on a new node") {
  const std::string dir = makeTempDir();
  auto daemon = startDaemon(
      dir, "daemon.log",
      {"--serve", "--state-dir", dir + "/state", "--max-group-slots", "0", "--progress-ms", "0",
       "--heartbeat-ms", "200", "--heartbeat-misses", "12", "--step-deadline-ms", "1000"},
      DaemonFiles{});
  REQUIRE(waitForText(dir + "/daemon.log", "serving jobs", 30000ms));
  // Dead after max(200 ms * 12, 1000 + 2 * 200) = 2.4 s of silence (nodes and workers
  // alike), as in the single-run failover test: a loaded machine does not kill trainers.
  auto node_a = startNode(dir, "node-a");
  auto node_b = startNode(dir, "node-b");
  REQUIRE(waitUntil([&] { return slots(dir)["node_slots"] == 2; }, 30000ms, 100ms));

  const json job = {{"name", "g"},        {"mode", "grouped"}, {"groups", 2},      {"workers", 2},
                    {"model", "softmax"}, {"batch_size", 32},  {"max_seconds", 60}};
  const std::string path = dir + "/g.json";
  std::ofstream(path) << job.dump();
  CHECK(ctlJson(dir, {"job", "submit", path})["node_slots"] == 2);
  std::vector<std::unique_ptr<Process>> workers;
  for (const std::string name : {"w1", "w2"}) {
    workers.push_back(std::make_unique<Process>(
        std::vector<std::string>{WORKER_PATH, "--coordinator", endpointIn(dir), "--job", "g",
                                 "--name", name, "--device-ms", "2", "--give-up-s", "60",
                                 "--timeout-ms", "3000"},
        dir + "/" + name + ".log"));
  }
  REQUIRE(waitUntil([&] { return version(dir) > 20; }, 30000ms, 200ms));

  REQUIRE(::kill(node_b->pid(), SIGKILL) == 0);
  REQUIRE(waitForText(dir + "/daemon.log", "group_failure", 20000ms));
  REQUIRE(waitUntil([&] { return slots(dir)["node_slots"] == 1; }, 20000ms, 100ms));
  const std::uint64_t after = version(dir);
  REQUIRE(waitUntil([&] { return version(dir) > after + 10; }, 20000ms, 200ms));

  // A node that joins now gets the job's lost slot; the failed group is re-created there.
  auto node_c = startNode(dir, "node-c");
  REQUIRE(waitForText(dir + "/daemon.log", "group_recreated", 20000ms));
  CHECK(slots(dir)["free"] == 0);

  ctlJson(dir, {"job", "stop", "g", "--drain"});
  REQUIRE(waitUntil(
      [&] {
        const json list = ctlJson(dir, {"job", "list"});
        for (const auto& row : list["jobs"]) {
          if (row["name"] == "g") return row["state"] == "stopped";
        }
        return false;
      },
      30000ms, 200ms));
  const json s = ctlJson(dir, {"job", "summary", "g"});
  INFO(s.dump());
  REQUIRE(s["node_failures"].size() == 1);
  bool recreated = false;
  for (const auto& e : s["events"]) recreated = recreated || e["kind"] == "group_recreated";
  CHECK(recreated);
  CHECK(s["accounting_ok"] == true);
  CHECK(s["samples_trained"].get<std::uint64_t>() > 0);
  for (auto& w : workers) CHECK(w->wait(30000ms) == std::optional<int>(0));
  for (auto* n : {node_a.get(), node_c.get()}) {
    ::kill(n->pid(), SIGTERM);
    CHECK(n->wait(30000ms) == std::optional<int>(0));
  }
  ::kill(daemon->pid(), SIGTERM);
  CHECK(daemon->wait(30000ms) == std::optional<int>(0));
}
