// PS placement on real processes (docs/cluster.md, "Placement"): a head with two group
// slots, one on node daemon A (host ha) and one on node daemon B (host hb), and four
// trainers that say they run on hb, ha, hb, ha (GROUPSGD_HOST), started one after the
// other. With ps_placement = hosts every group's PS is on its members' host; with
// `order` (least-loaded by registration alone) none is.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon_harness.h"

using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// PROGRAM ARGS with GROUPSGD_HOST=host in its environment.
std::vector<std::string> onHost(const std::string& host, std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"/usr/bin/env", "GROUPSGD_HOST=" + host});
  return argv;
}

struct Placed {
  json groups;   // the `groups` rows
  json workers;  // the `workers` rows
};

Placed runWithPlacement(const std::string& dir, const std::string& placement) {
  const std::vector<std::string> common = {"--mode", "grouped", "--workers", "4", "--groups", "2"};
  auto head = startDaemon(
      dir, "head.log", "tcp://127.0.0.1:0",
      withArgs(common, {"--role", "coordinator", "--progress-ms", "0", "--ps-placement", placement,
                        "--max-samples", "4000000", "--max-seconds", "120"}));
  const std::string ep = endpointIn(dir);
  std::vector<std::unique_ptr<Process>> procs;
  int ready = 0;
  for (const char* host : {"ha", "hb"}) {
    procs.push_back(
        std::make_unique<Process>(onHost(host, withArgs({GROUPSGDD_PATH, "--role", "node",
                                                         "--coordinator", ep, "--node-groups", "1"},
                                                        common)),
                                  dir + "/node-" + host + ".log"));
    // Slot order is offer order: slot 0 on ha, slot 1 on hb.
    REQUIRE(
        waitForText(dir + "/head.log", std::to_string(++ready) + " of 2 groups ready", 20000ms));
  }
  const char* hosts[] = {"hb", "ha", "hb", "ha"};
  for (int i = 0; i < 4; ++i) {
    procs.push_back(
        std::make_unique<Process>(onHost(hosts[i], {WORKER_PATH, "--coordinator", ep, "--name",
                                                    "w" + std::to_string(i), "--device-ms", "2"}),
                                  dir + "/w" + std::to_string(i) + ".log"));
    // One at a time, so the order of registration is the one written above.
    const json st = waitForStatus(
        dir, [&](const json& s) { return s["workers"]["active"] == i + 1; }, 30000ms);
    REQUIRE_MESSAGE(st["workers"]["active"] == i + 1, readFile(dir + "/head.log"));
  }
  Placed p{ctlJson(dir, {"groups"})["groups"], ctlJson(dir, {"workers"})["workers"]};
  ctlJson(dir, {"shutdown"});
  CHECK(head->wait(60000ms) == std::optional<int>(0));
  return p;
}

}  // namespace

TEST_CASE("placement: a group's PS is on the host of its members; `groups` says where and why") {
  for (const std::string placement : {"hosts", "order"}) {
    CAPTURE(placement);
    const std::string dir = makeTempDir();
    const Placed p = runWithPlacement(dir, placement);
    INFO("groups: " << p.groups.dump() << "\nworkers: " << p.workers.dump());
    REQUIRE(p.groups.size() == 2);
    CHECK(p.groups[0]["host"] == "ha");
    CHECK(p.groups[1]["host"] == "hb");
    std::size_t on_host = 0;
    for (const auto& g : p.groups) {
      CHECK(g["members"] == 2);
      CHECK(g["node"].is_number());
      on_host += g["members_on_host"].get<std::size_t>();
    }
    if (placement == "hosts") {
      CHECK(on_host == 4);
      CHECK(p.groups[0]["placement"] == "2 of 2 member(s) on its host");
      for (const auto& w : p.workers) {
        if (w["role"] != "trainer") continue;
        CHECK(w["host"] == p.groups[w["group"].get<int>()]["host"]);
      }
    } else {
      // Least-loaded in registration order: hb, ha, hb, ha go to slots 0, 1, 0, 1.
      CHECK(on_host == 0);
      CHECK(p.groups[0]["placement"].get<std::string>().find("order") != std::string::npos);
    }
    removeTestDir(dir);
  }
}
