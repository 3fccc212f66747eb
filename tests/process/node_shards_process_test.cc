// Central shards hosted by node daemons (docs/shards.md, "Who runs what"): a head with
// central_shards S and no central_shard_endpoints waits for node daemons started with
// --node-central-shard K to offer shards 1..S-1, builds the shard map from their offers,
// and trains; offers of another cut, model or seed, an index outside 1..S-1 and a shard
// offered twice are refused with an error naming what differs; a head restarted on its
// endpoint is offered the same shards again by the nodes that kept serving them.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon_harness.h"
#include "groupsgd/centralps/checkpoint.h"
#include "groupsgd/client/central_model_client.h"
#include "groupsgd/client/client.h"
#include "groupsgd/common/central_shard_map.h"
#include "worker_run.h"

using namespace groupsgd;
using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// groupsgdd --role node hosting central shard `index` for the head at `endpoint`, its
// output in DIR/NAME.log.
std::unique_ptr<Process> shardNode(const std::string& dir, const std::string& name,
                                   const std::string& endpoint, std::size_t shards,
                                   std::size_t index, const std::vector<std::string>& extra = {},
                                   std::uint32_t groups = 0) {
  std::vector<std::string> argv = {GROUPSGDD_PATH,
                                   "--role",
                                   "node",
                                   "--coordinator",
                                   endpoint,
                                   "--node-groups",
                                   std::to_string(groups),
                                   "--central-shards",
                                   std::to_string(shards),
                                   "--node-central-shard",
                                   std::to_string(index)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<Process>(argv, dir + "/" + name + ".log");
}

// The newest checkpoint version in dir (0 = none).
std::uint64_t newestCheckpoint(const std::string& dir) {
  auto listed = centralps::listCheckpoints(dir);
  if (!listed || listed->empty()) return 0;
  return listed->front().first;
}

// role all: the head runs both groups; role coordinator: each shard node offers one.
void nodesHostShards(const std::string& head_role) {
  WorkerRun run;
  const std::uint32_t node_groups = head_role == "coordinator" ? 1 : 0;
  run.start({"--role",         head_role, "--central-shards", "3",       "--progress-ms", "0",
             "--heartbeat-ms", "300",     "--mode",           "grouped", "--workers",     "4",
             "--groups",       "2",       "--target-acc",     "0.80",    "--max-seconds", "90",
             "--give-up-s",    "60"},
            DaemonFiles{.control_socket = false});
  std::vector<std::unique_ptr<Process>> nodes;
  for (std::size_t k = 1; k <= 2; ++k) {
    nodes.push_back(shardNode(run.dir, "node-" + std::to_string(k), run.endpoint, 3, k,
                              {"--checkpoint-dir", run.dir + "/node-" + std::to_string(k)},
                              node_groups));
  }
  for (int i = 0; i < 4; ++i) run.addWorker({"--device-ms", "2"});
  run.addWorker({"--evaluate", "--eval-interval-ms", "200"});
  // The map the head hands out names the nodes' shards, each where its node serves it.
  zmq::context_t ctx(1);
  client::CoordinatorClient probe(ctx, run.endpoint, 1, 5000ms);
  Result<client::Assignment> a = unavailable("not asked");
  REQUIRE(waitUntil(
      [&] {
        a = probe.registerAs(client::Role::kTool, "node-shard-probe");
        return a.isOk();
      },
      60000ms, 200ms));
  auto map = parseCentralShards(a->central_endpoint, a->param_count);
  REQUIRE_MESSAGE(map.isOk(), a->central_endpoint);
  REQUIRE(map->size() == 3);
  for (std::size_t k = 1; k <= 2; ++k) {
    const std::string node_log = readFile(run.dir + "/node-" + std::to_string(k) + ".log");
    CHECK_MESSAGE(
        node_log.find("central-shard " + std::to_string(k) + " of 3, parameters " +
                      std::to_string((*map)[k].begin) + "-" + std::to_string((*map)[k].end) +
                      " of mlp, seed 1 on " + (*map)[k].endpoint) != std::string::npos,
        node_log);
  }
  // An evaluator's read assembles the whole model from the head's shard and the nodes'.
  MessageLimits limits;
  limits.job_id = probe.jobId();
  client::CentralModelClient reader(ctx, a->central_endpoint, a->param_count, limits, {});
  std::vector<float> whole(a->param_count);
  auto version = reader.fetch(probe.jobId(), whole, 5000ms);
  CHECK_MESSAGE(version.isOk(), version.status().toString());
  (void)probe.leave(*a, 0, 0);
  // A third node claiming shard 1 once the run has its map: told where shard 1 is, it exits.
  auto late = shardNode(run.dir, "late", run.endpoint, 3, 1);
  auto late_rc = late->wait(30000ms);
  CHECK(late_rc == std::optional<int>(1));
  const std::string late_log = readFile(run.dir + "/late.log");
  CHECK_MESSAGE(late_log.find("the run's shard 1 is at " + (*map)[1].endpoint) != std::string::npos,
                late_log);

  json s = run.finish(120000ms);
  INFO("summary: " << s.dump());
  CHECK(s["reached"].get<bool>());
  CHECK(s["best_test_acc"].get<double>() >= 0.80);
  checkAccounting(s);
  // The nodes end with the run, each writing its shard's final checkpoint in its own folder:
  // every shard merged (about) every exchange the head's shard 0 did.
  const std::uint64_t central = s["central_version"].get<std::uint64_t>();
  REQUIRE(central > 10);
  for (std::size_t k = 1; k <= 2; ++k) {
    auto rc = nodes[k - 1]->wait(30000ms);
    CHECK_MESSAGE(
        rc == std::optional<int>(0),
        exitText(rc) << ": " << readFile(run.dir + "/node-" + std::to_string(k) + ".log"));
    const std::uint64_t v =
        newestCheckpoint(run.dir + "/node-" + std::to_string(k) + "/shard-" + std::to_string(k));
    INFO("shard " << k << " checkpoint version " << v << ", central " << central);
    CHECK(v * 10 >= central * 9);
    CHECK(v <= central + 2);
  }
  CHECK(readFile(run.dir + "/daemon.log").find("offered by node") != std::string::npos);
}

}  // namespace

TEST_CASE("node shards: node daemons host shards 1 and 2 of 3; the run reaches its target") {
  SUBCASE("role all head (its own group PSes)") { nodesHostShards("all"); }
  SUBCASE("role coordinator head (each shard node offers a group PS too)") {
    nodesHostShards("coordinator");
  }
}

TEST_CASE("node shards: bad offers are refused with a clear error") {
  const std::string dir = makeTempDir();
  // A head of central_shards `shards` gathering from node daemons for give_up_s 4.
  const auto startHead = [&](const std::string& name, std::size_t shards) {
    std::filesystem::create_directories(dir + "/" + name);
    return startDaemon(
        dir + "/" + name, "daemon.log",
        {"--central-shards", std::to_string(shards), "--progress-ms", "0", "--give-up-s", "4"},
        DaemonFiles{.control_socket = false});
  };
  // The head gives up (exit != 0); its log.
  const auto headGivesUp = [&](const std::string& name, Process& head) {
    auto rc = head.wait(30000ms);
    REQUIRE_MESSAGE(rc.has_value(), name << ": the head did not give up");
    CHECK(*rc != 0);
    return readFile(dir + "/" + name + "/daemon.log");
  };
  // The node is refused (exit 1); its log.
  const auto nodeRefused = [&](const std::string& name, Process& node) {
    auto rc = node.wait(30000ms);
    CHECK_MESSAGE(rc == std::optional<int>(1), name << ": " << exitText(rc));
    return readFile(dir + "/" + name + "/node.log");
  };
  const auto subdir = [&](const std::string& name) {
    std::filesystem::create_directories(dir + "/" + name);
    return dir + "/" + name;
  };
  SUBCASE("no node offers a shard") {
    auto head = startHead("none", 3);
    const std::string log = headGivesUp("none", *head);
    CHECK_MESSAGE(log.find("central shard(s) 1, 2 not offered by a node daemon "
                           "(node_central_shard) within give_up_s") != std::string::npos,
                  log);
  }
  SUBCASE("two nodes claim the same shard") {
    auto head = startHead("twice", 3);
    const std::string ep = endpointIn(dir + "/twice");
    auto first = shardNode(subdir("twice"), "first", ep, 3, 1);
    REQUIRE(waitForText(dir + "/twice/daemon.log", "offered by node", 20000ms));
    auto second = shardNode(dir + "/twice", "node", ep, 3, 1);
    const std::string node_log = nodeRefused("twice", *second);
    CHECK_MESSAGE(node_log.find("refused this node") != std::string::npos, node_log);
    CHECK_MESSAGE(node_log.find("central shard 1 is already offered by node") != std::string::npos,
                  node_log);
    const std::string log = headGivesUp("twice", *head);
    CHECK_MESSAGE(log.find("central shard(s) 2 not offered") != std::string::npos, log);
    CHECK_MESSAGE(log.find("central shard 1 is already offered by node") != std::string::npos, log);
  }
  SUBCASE("a shard index outside 1..S-1") {
    // The node's own configuration refuses it (exit 2) ...
    Process own({GROUPSGDD_PATH, "--role", "node", "--coordinator", "tcp://127.0.0.1:9",
                 "--node-groups", "0", "--central-shards", "3", "--node-central-shard", "3"},
                subdir("own") + "/node.log");
    auto rc = own.wait(10000ms);
    CHECK(rc == std::optional<int>(2));
    CHECK(readFile(dir + "/own/node.log")
              .find("node_central_shard 3 is not between 1 and central_shards-1 (2)") !=
          std::string::npos);
    // ... and a head of fewer shards refuses the node's shard 3.
    auto head = startHead("range", 3);
    auto node = shardNode(dir + "/range", "node", endpointIn(dir + "/range"), 4, 3);
    const std::string node_log = nodeRefused("range", *node);
    CHECK_MESSAGE(node_log.find("central shard 3 is outside this head's shards 1..2 "
                                "(central_shards 3)") != std::string::npos,
                  node_log);
    const std::string log = headGivesUp("range", *head);
    CHECK_MESSAGE(
        log.find("central shard 3 is outside this head's shards 1..2") != std::string::npos, log);
  }
  SUBCASE("a shard of another cut, model or seed") {
    struct Case {
      std::string name;
      std::vector<std::string> node_args;
      std::string says;
    };
    const std::vector<Case> cases = {
        {"split", {"--central-shard-split", "even"}, "central shard 1 covers parameters "},
        // (softmax has too few tensors for 3 shards: cut evenly)
        {"model",
         {"--model", "softmax", "--central-shard-split", "even"},
         "central shard 1 holds model softmax, this head's is mlp"},
        {"seed", {"--seed", "9"}, "central shard 1 started from seed 9, this head's is "},
        {"count", {}, "central shard 1 was cut for central_shards 3, this head's is 2"},
    };
    for (const Case& c : cases) {
      auto head = startHead(c.name, c.name == "count" ? 2 : 3);
      auto node =
          shardNode(dir + "/" + c.name, "node", endpointIn(dir + "/" + c.name), 3, 1, c.node_args);
      const std::string node_log = nodeRefused(c.name, *node);
      CHECK_MESSAGE(node_log.find(c.says) != std::string::npos, c.name << ": " << node_log);
      const std::string log = headGivesUp(c.name, *head);
      CHECK_MESSAGE(log.find(c.says) != std::string::npos, c.name << ": " << log);
    }
  }
  removeTestDir(dir);
}

TEST_CASE("node shards: a head restarted on its endpoint is offered the same shards again") {
  const std::string dir = makeTempDir();
  const std::string listen = "tcp://127.0.0.1:" + std::to_string(freePort());
  const std::vector<std::string> head_args = {"--central-shards", "3",   "--progress-ms", "0",
                                              "--heartbeat-ms",   "200", "--workers",     "2",
                                              "--groups",         "1",   "--give-up-s",   "30"};
  std::filesystem::create_directories(dir + "/first");
  std::filesystem::create_directories(dir + "/second");
  auto first =
      startDaemon(dir + "/first", "daemon.log", withArgs(head_args, {"--max-seconds", "120"}),
                  DaemonFiles{.listen = listen, .control_socket = false});
  std::vector<std::unique_ptr<Process>> nodes;
  for (std::size_t k = 1; k <= 2; ++k) {
    nodes.push_back(shardNode(dir, "node-" + std::to_string(k), listen, 3, k));
  }
  // The map of a head, once it runs.
  zmq::context_t ctx(1);
  const auto mapOfHead = [&] {
    client::CoordinatorClient probe(ctx, listen, 1, 2000ms);
    Result<client::Assignment> a = unavailable("not asked");
    REQUIRE(waitUntil(
        [&] {
          a = probe.registerAs(client::Role::kTool, "restart-probe");
          return a.isOk();
        },
        60000ms, 200ms));
    (void)probe.leave(*a, 0, 0);
    return a->central_endpoint;
  };
  const std::string map_before = mapOfHead();
  REQUIRE(isCentralShardMap(map_before));
  first.reset();  // SIGKILL
  // The nodes' heartbeats meet the new head gathering its shards: they register again and
  // offer the shards they kept serving.
  auto second =
      startDaemon(dir + "/second", "daemon.log", withArgs(head_args, {"--max-seconds", "3"}),
                  DaemonFiles{.listen = listen, .control_socket = false});
  const std::string map_after = mapOfHead();
  const auto shard_part = [](const std::string& map) {  // the map past shard 0's endpoint
    return map.substr(map.find(','));
  };
  CHECK(shard_part(map_after) == shard_part(map_before));
  // Two trainers train with the shards for its 3 s (the clock starts with training).
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(std::make_unique<Process>(
        std::vector<std::string>{WORKER_PATH, "--coordinator", listen, "--device-ms", "2"},
        dir + "/worker-" + std::to_string(i) + ".log"));
  }
  auto rc = second->wait(60000ms);
  CHECK_MESSAGE(rc == std::optional<int>(0), readFile(dir + "/second/daemon.log"));
  const json summary = readSummary(dir + "/second");
  INFO("summary: " << summary.dump());
  CHECK(summary["central_version"].get<std::uint64_t>() > 0);
  checkAccounting(summary);
  const std::string log = readFile(dir + "/second/daemon.log");
  CHECK_MESSAGE(log.find("central shard 1 (parameters") != std::string::npos, log);
  CHECK_MESSAGE(log.find("central shard 2 (parameters") != std::string::npos, log);
  for (std::size_t k = 1; k <= 2; ++k) {  // stopped by the second head at its end
    auto node_rc = nodes[k - 1]->wait(30000ms);
    CHECK_MESSAGE(node_rc == std::optional<int>(0),
                  readFile(dir + "/node-" + std::to_string(k) + ".log"));
  }
  removeTestDir(dir);
}

namespace {

// The last version a shard's central PS applied, from its debug lines "applied delta ... v=N".
std::uint64_t lastAppliedVersion(const std::string& log) {
  std::uint64_t last = 0;
  for (auto at = log.find("applied delta"); at != std::string::npos;
       at = log.find("applied delta", at + 1)) {
    const auto v = log.find(" v=", at);
    if (v == std::string::npos || v > log.find('\n', at)) continue;
    last = std::max<std::uint64_t>(last, std::strtoull(log.c_str() + v + 3, nullptr, 10));
  }
  return last;
}

}  // namespace

TEST_CASE(
    "faults: a node hosting shard 1 with a standby (replication_listen, "
    "node_central_shard_standby) SIGKILLed: the standby takes the shard over with no "
    "acknowledged version lost, the groups move to it through the map's failover list, and "
    "the run spends its budget with the accounting intact") {
  WorkerRun run;
  const std::string replication = "tcp://127.0.0.1:" + std::to_string(freePort());
  const std::string standby_ep = "tcp://127.0.0.1:" + std::to_string(freePort());
  run.start({"--central-shards",
             "2",
             "--progress-ms",
             "0",
             "--heartbeat-ms",
             "300",
             "--mode",
             "grouped",
             "--workers",
             "2",
             "--groups",
             "2",
             "--max-samples",
             "40000",
             "--max-seconds",
             "150",
             "--give-up-s",
             "60",
             "--exchange-timeout-ms",
             "2000"},
            DaemonFiles{.control_socket = false});
  auto node = shardNode(run.dir, "node", run.endpoint, 2, 1,
                        {"--replication-listen", replication, "--node-central-shard-standby",
                         standby_ep, "--standby-takeover-ms", "2000", "--log-level", "debug"});
  const std::string standby_file = run.dir + "/standby.ep";
  Process standby({GROUPSGDD_PATH, "--role", "central-shard", "--central-shards", "2",
                   "--shard-index", "1", "--primary", replication, "--listen", standby_ep,
                   "--endpoint-file", standby_file, "--standby-takeover-ms", "2000"},
                  run.dir + "/standby.log");
  REQUIRE_MESSAGE(waitForFile(standby_file, 20000ms), readFile(run.dir + "/standby.log"));
  for (int i = 0; i < 2; ++i) run.addWorker({"--device-ms", "3"});
  // Its fetch from the dead node gives up after 2 s (15 s by default), then asks the standby.
  run.addWorker({"--evaluate", "--eval-interval-ms", "300", "--timeout-ms", "2000"});

  // The head's map names shard 1 by the node's endpoint and then the standby's.
  zmq::context_t ctx(1);
  client::CoordinatorClient probe(ctx, run.endpoint, 1, 5000ms);
  Result<client::Assignment> a = unavailable("not asked");
  REQUIRE(waitUntil(
      [&] {
        a = probe.registerAs(client::Role::kTool, "node-shard-probe");
        return a.isOk();
      },
      60000ms, 200ms));
  auto map = parseCentralShards(a->central_endpoint, a->param_count);
  REQUIRE_MESSAGE(map.isOk(), a->central_endpoint);
  REQUIRE(map->size() == 2);
  const auto list = (*map)[1].alternatives();
  REQUIRE(list.size() == 2);
  CHECK(list[1] == standby_ep);
  (void)probe.leave(*a, 0, 0);
  const std::size_t size = (*map)[1].end - (*map)[1].begin;
  MessageLimits limits;
  limits.job_id = 1;
  const auto versionAt = [&](const std::string& ep) -> std::uint64_t {
    RpcClient rpc(ctx, ep, limits);
    std::vector<float> params(size);
    auto v = client::fetchCentralModel(rpc, 1, params, 5000ms);
    return v ? *v : 0;
  };
  // A 2 s takeover bound: with 1 s the shard once made no progress under load (not
  // diagnosed; a standby lost before the kill is the likely cause). The logs say more.
  REQUIRE_MESSAGE(waitUntil([&] { return versionAt(list[0]) >= 10; }, 90000ms, 100ms),
                  "node: " << readFile(run.dir + "/node.log")
                           << "\nstandby: " << readFile(run.dir + "/standby.log")
                           << "\nhead: " << readFile(run.dir + "/daemon.log"));

  const double killed_at = wallNow();
  REQUIRE(::kill(node->pid(), SIGKILL) == 0);
  REQUIRE(node->wait(10000ms).has_value());
  const std::uint64_t node_applied = lastAppliedVersion(readFile(run.dir + "/node.log"));
  REQUIRE(node_applied >= 10);
  REQUIRE(waitUntil(
      [&] { return readFile(run.dir + "/standby.log").find("TAKING OVER") != std::string::npos; },
      10000ms, 20ms));

  json s = run.finish(200000ms);
  INFO("summary: " << s.dump());
  const std::string slog = readFile(run.dir + "/standby.log");
  const std::string head_log = readFile(run.dir + "/daemon.log");
  INFO("standby: " << slog);
  CHECK(s["stop_reason"] == "sample budget spent");
  checkAccounting(s);
  // 0 acknowledged versions lost: the node's shard answered a group only once its standby
  // had the version.
  const std::string key = "promoted from its standby replica at version ";
  const auto at = slog.find(key);
  REQUIRE(at != std::string::npos);
  const std::uint64_t resumed = std::strtoull(slog.c_str() + at + key.size(), nullptr, 10);
  CHECK(resumed >= node_applied);
  CHECK(resumed <= node_applied + 1);
  CHECK_MESSAGE(head_log.find("central shard 1: moving to " + standby_ep) != std::string::npos,
                head_log);
  CHECK(head_log.find("acknowledged versions lost") == std::string::npos);
  const std::uint64_t after = versionAt(standby_ep);
  CHECK(after > resumed + 5);
  const double took_over = stampOf(slog, "TAKING OVER");
  const double first_update = stampOf(slog, "takeover: first update applied");
  REQUIRE(first_update > 0);
  std::printf(
      "faults: node hosting shard 1 SIGKILL at version %llu, its standby promoted at %llu "
      "(versions lost 0: %d); takeover %.2f s after the kill (standby_takeover_ms 2000), first "
      "group delta merged there %.2f s after it (exchange_timeout_ms 2 s), shard version %llu "
      "at the end; %llu samples, accounting ok %d\n",
      static_cast<unsigned long long>(node_applied), static_cast<unsigned long long>(resumed),
      resumed >= node_applied ? 1 : 0, took_over - killed_at, first_update - killed_at,
      static_cast<unsigned long long>(after), llu(s["samples_trained"]),
      s["accounting_ok"].get<bool>() ? 1 : 0);
}
