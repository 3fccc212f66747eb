// CURVE for a multi-job daemon's node daemons (docs/jobs.md, "Node daemons"): a node
// with its own key pair joins the pool by its allow-list line `node`; a worker's key may
// not; a job's keyed workers train through the node's group PS (authenticated by the
// node's key). Skipped when libzmq lacks CURVE.
#include <doctest/doctest.h>

#include <zmq.h>

#include <csignal>
#include <fstream>

#include "daemon_harness.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

TEST_CASE("serve with node daemons under CURVE: node keys join the pool, worker keys do not" *
          doctest::skip(zmq_has("curve") == 0)) {
  const std::string dir = makeTempDir();
  generateKeys(dir, {"server", "node", "w0", "w1"});
  {
    std::ofstream allow(dir + "/allow");
    allow << readFile(dir + "/w0.pub") << readFile(dir + "/w1.pub");
    std::string node_key = readFile(dir + "/node.pub");
    node_key.erase(node_key.find_last_not_of("\n") + 1);
    allow << node_key << " node  # n1\n";
  }
  // The node admits the workers (its group PS serves them); the daemon's key it admits itself.
  std::ofstream(dir + "/node-allow") << readFile(dir + "/w0.pub") << readFile(dir + "/w1.pub");
  auto daemon = startDaemon(
      dir, "daemon.log",
      {"--serve", "--state-dir", dir + "/state", "--max-group-slots", "0", "--progress-ms", "0",
       "--heartbeat-ms", "200", "--step-deadline-ms", "2000", "--curve-secret-key-file",
       dir + "/server.key", "--curve-allow-file", dir + "/allow"},
      DaemonFiles{});
  REQUIRE(waitForText(dir + "/daemon.log", "serving jobs", 30000ms));
  const auto nodeArgs = [&](const std::string& key) {
    return withArgs({groupsgddPath(), "--role", "node", "--coordinator", endpointIn(dir),
                     "--node-groups", "1", "--give-up-s", "5"},
                    nodeCurveArgs(dir, key));
  };
  checkImpostorNodeRefused(dir, nodeArgs("w0"));
  Process node(nodeArgs("node"), dir + "/node.log");
  REQUIRE(waitUntil(
      [&] {
        return ctlJson(dir, {"job", "list"})["group_slots"]["node_slots"] == 1;
      },
      30000ms, 100ms));

  const json job = {{"name", "k"},        {"mode", "sync"},   {"workers", 2},
                    {"model", "softmax"}, {"batch_size", 32}, {"max_samples", 3000}};
  std::ofstream(dir + "/k.json") << job.dump();
  CHECK(ctlJson(dir, {"job", "submit", dir + "/k.json"})["node_slots"] == 1);
  std::vector<std::unique_ptr<Process>> workers;
  for (const std::string name : {"w0", "w1"}) {
    workers.push_back(std::make_unique<Process>(
        std::vector<std::string>{WORKER_PATH, "--coordinator", endpointIn(dir), "--job", "k",
                                 "--name", name, "--device-ms", "2", "--give-up-s", "60",
                                 "--curve-secret-key-file", dir + "/" + name + ".key",
                                 "--curve-server-key-file", dir + "/server.pub"},
        dir + "/" + name + ".log"));
  }
  const bool finished = waitUntil(
      [&] {
        const json list = ctlJson(dir, {"job", "list"});
        for (const auto& row : list["jobs"]) {
          if (row["name"] == "k") return row["state"] == "finished";
        }
        return false;
      },
      60000ms, 250ms);
  INFO("daemon: " << readFile(dir + "/daemon.log"));
  INFO("node: " << readFile(dir + "/node.log"));
  INFO("w0: " << readFile(dir + "/w0.log"));
  REQUIRE(finished);
  const json s = ctlJson(dir, {"job", "summary", "k"});
  CHECK(s["curve"]["enabled"] == true);
  CHECK(s["accounting_ok"] == true);
  CHECK(s["samples_trained"].get<std::uint64_t>() >= 3000);
  for (auto& w : workers) CHECK(w->wait(30000ms) == std::optional<int>(0));
  ::kill(node.pid(), SIGTERM);
  CHECK(node.wait(30000ms) == std::optional<int>(0));
  ::kill(daemon->pid(), SIGTERM);
  CHECK(daemon->wait(30000ms) == std::optional<int>(0));
}
