// Central shards (docs/shards.md) across real processes on TCP loopback: shards 1..S-1 are
// groupsgdd --role central-shard processes, the head serves shard 0 and hands out the
// shard map; group PSes exchange with every shard and evaluators read every shard; a
// restart of the head and every shard resumes from the newest consistent cut.
#include <doctest/doctest.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon_harness.h"
#include "groupsgd/centralps/checkpoint.h"
#include "groupsgd/centralps/shard_cut.h"
#include "groupsgd/centralps/shard_plan.h"
#include "groupsgd/client/central_model_client.h"
#include "groupsgd/client/client.h"
#include "groupsgd/common/central_shard_map.h"
#include "groupsgd/kernels/model.h"
#include "head_restart.h"
#include "worker_run.h"

using namespace groupsgd;
using namespace groupsgd::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// Shards 1..S-1 (role central-shard) in dir, and the head's flags naming them.
struct Shards {
  std::vector<std::unique_ptr<Process>> procs;
  std::vector<std::string> endpoints;  // shards 1..S-1
  std::vector<std::vector<std::string>> argvs;

  Shards(const std::string& dir, std::size_t count, const std::vector<std::string>& extra = {}) {
    for (std::size_t k = 1; k < count; ++k) {
      const std::string ep_file = dir + "/shard-" + std::to_string(k) + ".ep";
      std::vector<std::string> argv = {GROUPSGDD_PATH,
                                       "--role",
                                       "central-shard",
                                       "--central-shards",
                                       std::to_string(count),
                                       "--shard-index",
                                       std::to_string(k),
                                       "--listen",
                                       "tcp://127.0.0.1:0",
                                       "--endpoint-file",
                                       ep_file};
      argv.insert(argv.end(), extra.begin(), extra.end());
      argvs.push_back(argv);
      procs.push_back(
          std::make_unique<Process>(argv, dir + "/shard-" + std::to_string(k) + ".log"));
      REQUIRE_MESSAGE(waitForFile(ep_file, 20000ms),
                      readFile(dir + "/shard-" + std::to_string(k) + ".log"));
      std::string ep = readFile(ep_file);
      while (!ep.empty() && (ep.back() == '\n' || ep.back() == '\r')) ep.pop_back();
      endpoints.push_back(ep);
    }
  }
  // Shard k (1..S-1) started again on the endpoint it had (its log: shard-K-again.log).
  void restart(const std::string& dir, std::size_t k) {
    std::vector<std::string> argv = argvs[k - 1];
    for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "--listen") argv[i + 1] = endpoints[k - 1];
    }
    procs[k - 1] =
        std::make_unique<Process>(argv, dir + "/shard-" + std::to_string(k) + "-again.log");
  }
  std::vector<std::string> headFlags() const {
    std::string list;
    for (const auto& ep : endpoints) list += (list.empty() ? "" : ",") + ep;
    return {"--central-shards", std::to_string(endpoints.size() + 1), "--central-shard-endpoints",
            list};
  }
};

std::vector<centralps::ShardRange> mlpRanges(std::size_t shards, bool even = false) {
  if (even) {
    auto ranges = centralps::planEvenShards(
        kernels::makeModel(kernels::ModelKind::kMlp)->paramCount(), shards);
    REQUIRE(ranges.isOk());
    return *ranges;
  }
  auto ranges =
      centralps::planShards(centralps::modelTensorSizes(kernels::ModelKind::kMlp), shards);
  REQUIRE(ranges.isOk());
  return *ranges;
}

// Shard k's model read straight from it (job 1, the daemon's default): its version.
std::uint64_t shardVersion(zmq::context_t& ctx, const std::string& endpoint, std::size_t size,
                           std::vector<float>* params = nullptr) {
  MessageLimits limits;
  limits.job_id = 1;
  RpcClient rpc(ctx, endpoint, limits);
  std::vector<float> own(size);
  auto v = client::fetchCentralModel(rpc, 1, params != nullptr ? *params : own, 5000ms);
  REQUIRE_MESSAGE(v.isOk(), v.status().toString());
  return *v;
}

// Shard k's exchange marks, read by freezing it and releasing it at once (the cut
// protocol's first and last steps; docs/shards.md, "Consistent cut").
centralps::ExchangeMarks shardMarks(zmq::context_t& ctx, const std::string& endpoint) {
  MessageLimits limits;
  limits.job_id = 1;
  RpcClient rpc(ctx, endpoint, limits);
  const auto phase = [&](int p) {
    OutMessage out(1, 0);
    out.header().getBody().initCheckpointRequest().setCutPhase(static_cast<std::uint8_t>(p));
    auto r = rpc.call(std::move(out), 5000ms);
    REQUIRE_MESSAGE(r.isOk(), r.status().toString());
    return std::move(*r);
  };
  const InMessage frozen = phase(1);
  centralps::ExchangeMarks marks;
  for (auto m : frozen.header().getBody().getCheckpointDone().getCutMarks()) {
    marks[m.getGroupId()] = m.getSeq();
  }
  (void)phase(3);
  return marks;
}

void trainsToTarget(std::size_t shards, const std::string& split = "tensors") {
  WorkerRun run;
  Shards sh(run.dir, shards, {"--central-shard-split", split});
  std::vector<std::string> args = {
      "--progress-ms", "0", "--heartbeat-ms", "300",  "--mode",        "grouped", "--workers", "4",
      "--groups",      "2", "--target-acc",   "0.80", "--max-seconds", "90"};
  for (const auto& f : sh.headFlags()) args.push_back(f);
  args.insert(args.end(), {"--central-shard-split", split});
  run.start(args, DaemonFiles{.control_socket = false});
  for (int i = 0; i < 4; ++i) run.addWorker({"--device-ms", "2"});
  run.addWorker({"--evaluate", "--eval-interval-ms", "200"});
  json s = run.finish(120000ms);
  INFO("summary: " << s.dump());
  CHECK(s["reached"].get<bool>());
  CHECK(s["best_test_acc"].get<double>() >= 0.80);
  checkAccounting(s);
  // Every shard merged the groups' deltas (each has its own version; the head's shard 0
  // is the summary's central version): none was left behind.
  const auto ranges = mlpRanges(shards, split == "even");
  const std::uint64_t central = s["central_version"].get<std::uint64_t>();
  REQUIRE(central > 10);
  zmq::context_t ctx(1);
  for (std::size_t k = 1; k < shards; ++k) {
    const std::uint64_t v = shardVersion(ctx, sh.endpoints[k - 1], ranges[k].end - ranges[k].begin);
    INFO("shard " << k << " version " << v << ", central " << central);
    CHECK(v * 10 >= central * 9);
    CHECK(v <= central + 2);
  }
}

}  // namespace

TEST_CASE("central shards: 2, 3 and 4 shards train to the demo target, every shard merging") {
  SUBCASE("2 shards") { trainsToTarget(2); }
  SUBCASE("3 shards") { trainsToTarget(3); }
  SUBCASE("4 shards, even split (inside tensors)") { trainsToTarget(4, "even"); }
}

TEST_CASE("central shards: the model an evaluator assembles is the shards' models in order") {
  WorkerRun run;
  // The shards must start from the same seed as the head.
  Shards seeded(run.dir, 3, {"--seed", "7"});
  std::vector<std::string> args = {"--progress-ms", "0", "--workers",     "2", "--groups", "1",
                                   "--seed",        "7", "--max-seconds", "60"};
  for (const auto& f : seeded.headFlags()) args.push_back(f);
  run.start(args, DaemonFiles{.control_socket = false});
  zmq::context_t ctx(1);
  client::CoordinatorClient probe(ctx, run.endpoint, 1, 5000ms);
  auto a = probe.registerAs(client::Role::kTool, "shard-probe");
  REQUIRE_MESSAGE(a.isOk(), a.status().toString());
  // The assignment names every shard, in order, over the whole model.
  auto map = parseCentralShards(a->central_endpoint, a->param_count);
  REQUIRE_MESSAGE(map.isOk(), a->central_endpoint);
  REQUIRE(map->size() == 3);
  const auto ranges = mlpRanges(3);
  for (std::size_t k = 0; k < 3; ++k) {
    CHECK((*map)[k].begin == ranges[k].begin);
    CHECK((*map)[k].end == ranges[k].end);
    if (k > 0) CHECK((*map)[k].endpoint == seeded.endpoints[k - 1]);
  }
  MessageLimits limits;
  limits.job_id = probe.jobId();
  client::CentralModelClient reader(ctx, a->central_endpoint, a->param_count, limits, {});
  std::vector<float> whole(a->param_count);
  auto version = reader.fetch(probe.jobId(), whole, 5000ms);
  REQUIRE_MESSAGE(version.isOk(), version.status().toString());
  std::vector<float> concatenated;
  for (std::size_t k = 0; k < 3; ++k) {
    std::vector<float> part((*map)[k].size());
    (void)shardVersion(ctx, (*map)[k].endpoint, part.size(), &part);
    concatenated.insert(concatenated.end(), part.begin(), part.end());
  }
  CHECK(whole == concatenated);
  // And that is the seeded model, not a slice of another.
  auto model = kernels::makeModel(kernels::ModelKind::kMlp);
  std::vector<float> seeded_model(model->paramCount());
  model->init(seeded_model, 7);
  CHECK(whole == seeded_model);
  // A shard named by a failover list whose first endpoint is silent: the reader asks the
  // next one, and keeps it (the second fetch does not wait on the silent one again).
  std::string listed = a->central_endpoint;
  const std::string at_shard1 = "@" + seeded.endpoints[0];
  const auto where = listed.find(at_shard1);
  REQUIRE(where != std::string::npos);
  listed.replace(where, at_shard1.size(),
                 "@tcp://127.0.0.1:" + std::to_string(freePort()) + "|" + seeded.endpoints[0]);
  client::CentralModelClient failing_over(ctx, listed, a->param_count, limits, {});
  std::vector<float> again(a->param_count);
  auto first = failing_over.fetch(probe.jobId(), again, 1000ms);
  REQUIRE_MESSAGE(first.isOk(), first.status().toString());
  CHECK(again == whole);
  const auto before = std::chrono::steady_clock::now();
  auto second = failing_over.fetch(probe.jobId(), again, 1000ms);
  REQUIRE_MESSAGE(second.isOk(), second.status().toString());
  CHECK(std::chrono::steady_clock::now() - before < 900ms);
  // A map whose last shard stops short of the model is refused on every fetch.
  client::CentralModelClient short_map(ctx, a->central_endpoint, a->param_count + 1, limits, {});
  auto refused = short_map.fetch(probe.jobId(), whole, 1000ms);
  CHECK_FALSE(refused.isOk());
}

TEST_CASE("central shards: bad input is refused with a clear error") {
  const std::string dir = makeTempDir();
  const auto runHead = [&](const std::string& name, std::vector<std::string> args) {
    std::vector<std::string> argv = {GROUPSGDD_PATH, "--listen", "tcp://127.0.0.1:0",
                                     "--progress-ms", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    Process head(argv, dir + "/" + name + ".log");
    auto rc = head.wait(30000ms);
    REQUIRE_MESSAGE(rc.has_value(), name << " did not exit");
    CHECK(*rc != 0);
    return readFile(dir + "/" + name + ".log");
  };
  SUBCASE("more shards than the model has tensors") {
    // mlp: W1 b1 W2 b2 W3 b3.
    std::string eps = "tcp://127.0.0.1:1";
    for (int i = 0; i < 5; ++i) eps += ",tcp://127.0.0.1:1";
    const std::string log =
        runHead("too-many", {"--central-shards", "7", "--central-shard-endpoints", eps});
    CHECK_MESSAGE(log.find("central_shards 7 exceeds the model's 6 tensors") != std::string::npos,
                  log);
  }
  SUBCASE("a shard endpoint that does not answer") {
    const std::string log = runHead("silent", {"--central-shards", "2", "--central-shard-endpoints",
                                               "tcp://127.0.0.1:9", "--give-up-s", "1"});
    CHECK_MESSAGE(
        log.find("central shard 1 at tcp://127.0.0.1:9 did not answer") != std::string::npos, log);
  }
  SUBCASE("a shard serving another cut") {
    Shards other(dir, 3);  // its shard 1 is shard 1 of 3, not of 2
    const std::string log =
        runHead("other-cut", {"--central-shards", "2", "--central-shard-endpoints",
                              other.endpoints[0], "--give-up-s", "3"});
    CHECK_MESSAGE(log.find("central shard 1 at " + other.endpoints[0]) != std::string::npos, log);
  }
  SUBCASE("endpoints not matching the shard count") {
    const std::string log = runHead(
        "count", {"--central-shards", "3", "--central-shard-endpoints", "tcp://127.0.0.1:9"});
    CHECK_MESSAGE(log.find("central_shards 3 needs 2 central_shard_endpoints") != std::string::npos,
                  log);
  }
  SUBCASE("a shard standby for shard 0") {
    const auto refused = [&](const std::string& name, std::vector<std::string> more) {
      std::vector<std::string> argv = {GROUPSGDD_PATH,     "--role", "central-shard",
                                       "--central-shards", "2",      "--primary",
                                       "tcp://127.0.0.1:9"};
      argv.insert(argv.end(), more.begin(), more.end());
      Process p(argv, dir + "/" + name + ".log");
      auto rc = p.wait(10000ms);
      REQUIRE(rc.has_value());
      CHECK(*rc == 2);
      return readFile(dir + "/" + name + ".log");
    };
    std::string log = refused("standby-0", {"--shard-index", "0"});
    CHECK_MESSAGE(log.find("shard 0 is the head's") != std::string::npos, log);
  }
  SUBCASE("a standby following another shard's (or cut's) primary, or a head's standby a shard") {
    const std::string replication = "tcp://127.0.0.1:" + std::to_string(freePort());
    Shards primary(dir, 2, {"--replication-listen", replication});
    const auto follows = [&](const std::string& name, std::vector<std::string> argv) {
      argv.insert(argv.begin(), GROUPSGDD_PATH);
      argv.insert(argv.end(), {"--primary", replication, "--listen",
                               "tcp://127.0.0.1:" + std::to_string(freePort())});
      Process p(argv, dir + "/" + name + ".log");
      auto rc = p.wait(20000ms);
      REQUIRE_MESSAGE(rc.has_value(), name << " did not exit");
      CHECK(*rc == 1);
      return readFile(dir + "/" + name + ".log");
    };
    // Shard 1 of 3 is another range than the primary's shard 1 of 2.
    std::string log = follows(
        "other-cut", {"--role", "central-shard", "--central-shards", "3", "--shard-index", "1"});
    CHECK_MESSAGE(log.find("is central-shard 1 of 2, parameters") != std::string::npos, log);
    CHECK_MESSAGE(log.find("this standby follows central-shard 1 of 3") != std::string::npos, log);
    // Another seed: another model, same range.
    log = follows("other-seed", {"--role", "central-shard", "--central-shards", "2",
                                 "--shard-index", "1", "--seed", "9"});
    CHECK_MESSAGE(log.find("seed 9") != std::string::npos, log);
    // A head's standby does not take over a shard.
    log = follows("head-standby", {"--role", "standby"});
    CHECK_MESSAGE(log.find("this standby follows a head") != std::string::npos, log);
  }
  SUBCASE("a sharded head's standby for another shard count, model or seed, or unsharded") {
    // The primary: a 2-shard head with a standby port (it waits for one: no workers needed).
    Shards shard(dir, 2);
    const std::string replication = "tcp://127.0.0.1:" + std::to_string(freePort());
    Process primary({GROUPSGDD_PATH, "--listen", "tcp://127.0.0.1:0", "--progress-ms", "0",
                     "--max-seconds", "60", "--replication-listen", replication, "--central-shards",
                     "2", "--central-shard-endpoints", shard.endpoints[0]},
                    dir + "/sharded-primary.log");
    const auto follows = [&](const std::string& name, std::vector<std::string> more) {
      std::vector<std::string> argv = {GROUPSGDD_PATH,
                                       "--role",
                                       "standby",
                                       "--primary",
                                       replication,
                                       "--listen",
                                       "tcp://127.0.0.1:" + std::to_string(freePort())};
      argv.insert(argv.end(), more.begin(), more.end());
      Process p(argv, dir + "/" + name + ".log");
      auto rc = p.wait(20000ms);
      REQUIRE_MESSAGE(rc.has_value(), name << " did not exit");
      CHECK(*rc == 1);
      return readFile(dir + "/" + name + ".log");
    };
    const std::string theirs = "is a head (role all with central shard 0 of 2, parameters 0-";
    std::string log =
        follows("head-other-count", {"--central-shards", "3", "--central-shard-endpoints",
                                     "tcp://127.0.0.1:9,tcp://127.0.0.1:9"});
    CHECK_MESSAGE(log.find(theirs) != std::string::npos, log);
    CHECK_MESSAGE(log.find("this standby follows a head (role all or coordinator with central "
                           "shard 0 of 3, parameters 0-") != std::string::npos,
                  log);
    log = follows("head-other-split", {"--central-shards", "2", "--central-shard-split", "even",
                                       "--central-shard-endpoints", "tcp://127.0.0.1:9"});
    CHECK_MESSAGE(log.find(theirs) != std::string::npos, log);
    CHECK_MESSAGE(
        log.find("with central shard 0 of 2, parameters 0-117573 of mlp") != std::string::npos,
        log);
    log = follows("head-other-seed", {"--central-shards", "2", "--seed", "9",
                                      "--central-shard-endpoints", "tcp://127.0.0.1:9"});
    CHECK_MESSAGE(log.find("seed 9") != std::string::npos, log);
    log = follows("head-unsharded", {});
    CHECK_MESSAGE(log.find(theirs) != std::string::npos, log);
    CHECK_MESSAGE(log.find("this standby follows a head (role all or coordinator, central_shards "
                           "1)") != std::string::npos,
                  log);
    // Accepted: a sharded standby without the list (it would gather its shards from node
    // daemons once promoted) follows a primary of the same cut; it stops on a signal.
    Process unlisted({GROUPSGDD_PATH, "--role", "standby", "--primary", replication,
                      "--central-shards", "2", "--endpoint-file", dir + "/unlisted.ep"},
                     dir + "/head-unlisted.log");
    CHECK_MESSAGE(waitForFile(dir + "/unlisted.ep", 20000ms), readFile(dir + "/head-unlisted.log"));
    ::kill(unlisted.pid(), SIGTERM);
    CHECK(unlisted.wait(15000ms) == std::optional<int>(0));
    CHECK(readFile(dir + "/head-unlisted.log").find("standby: following the primary") !=
          std::string::npos);
    // The primary followed nobody: it committed nothing.
    CHECK(readFile(dir + "/sharded-primary.log").find("applied delta") == std::string::npos);
  }
  SUBCASE("a shard index outside 1..S-1") {
    Process shard(
        {GROUPSGDD_PATH, "--role", "central-shard", "--central-shards", "2", "--shard-index", "2"},
        dir + "/index.log");
    auto rc = shard.wait(10000ms);
    REQUIRE(rc.has_value());
    CHECK(*rc == 2);
    CHECK(readFile(dir + "/index.log").find("--shard-index between 1 and central_shards-1") !=
          std::string::npos);
  }
  removeTestDir(dir);
}

TEST_CASE("central shards: with central_shards 1 the assignment names one central PS, as before") {
  WorkerRun run;
  run.start({"--progress-ms", "0", "--workers", "2", "--groups", "1", "--max-seconds", "60"},
            DaemonFiles{.control_socket = false});
  zmq::context_t ctx(1);
  client::CoordinatorClient probe(ctx, run.endpoint, 1, 5000ms);
  auto a = probe.registerAs(client::Role::kTool, "one-central-probe");
  REQUIRE_MESSAGE(a.isOk(), a.status().toString());
  CHECK_FALSE(isCentralShardMap(a->central_endpoint));
  CHECK(a->central_endpoint.rfind("tcp://", 0) == 0);
}

TEST_CASE(
    "central shards: a shard SIGKILLed mid-run and restarted on its endpoint: the groups "
    "resynchronise, the run reaches the target and the accounting holds") {
  WorkerRun run;
  Shards sh(run.dir, 2);
  std::vector<std::string> args = {
      "--progress-ms", "0", "--heartbeat-ms", "300",  "--mode",        "grouped", "--workers", "4",
      "--groups",      "2", "--target-acc",   "0.80", "--max-seconds", "120"};
  for (const auto& f : sh.headFlags()) args.push_back(f);
  run.start(args, DaemonFiles{.control_socket = false});
  for (int i = 0; i < 4; ++i) run.addWorker({"--device-ms", "3"});
  run.addWorker({"--evaluate", "--eval-interval-ms", "200"});
  const auto ranges = mlpRanges(2);
  const std::size_t size = ranges[1].end - ranges[1].begin;
  zmq::context_t ctx(1);
  REQUIRE(
      waitUntil([&] { return shardVersion(ctx, sh.endpoints[0], size) >= 10; }, 60000ms, 100ms));
  sh.procs[0].reset();  // SIGKILL: its range goes back to where it started
  std::this_thread::sleep_for(500ms);
  sh.restart(run.dir, 1);
  json s = run.finish(180000ms);
  INFO("summary: " << s.dump());
  CHECK(s["reached"].get<bool>());
  checkAccounting(s);
  // The groups noticed and came back to the restarted shard, which merged again.
  const std::string head_log = readFile(run.dir + "/daemon.log");
  CHECK((head_log.find("no answer from central shard 1") != std::string::npos ||
         head_log.find("central shard 1 did not apply") != std::string::npos));
  CHECK(shardVersion(ctx, sh.endpoints[0], size) > 0);
  // Without a standby, what the shard had answered since its start is gone.
  CHECK_MESSAGE(head_log.find("acknowledged versions lost") != std::string::npos, head_log);
}

namespace {

// The version in the promoted shard's "promoted from its standby replica at version V".
std::uint64_t promotedAt(const std::string& log) {
  const auto at = log.find("promoted from its standby replica at version ");
  if (at == std::string::npos) return 0;
  return std::strtoull(log.c_str() + at + 45, nullptr, 10);
}

// The last version a central PS applied, from its debug lines "applied delta ... v=N".
std::uint64_t lastApplied(const std::string& log) {
  std::uint64_t last = 0;
  for (std::size_t at = log.find("applied delta"); at != std::string::npos;
       at = log.find("applied delta", at + 1)) {
    const auto v = log.find(" v=", at);
    if (v == std::string::npos || v > log.find('\n', at)) continue;
    last = std::max<std::uint64_t>(last, std::strtoull(log.c_str() + v + 3, nullptr, 10));
  }
  return last;
}

}  // namespace

TEST_CASE(
    "faults: shard 1's primary SIGKILLed mid-run, its synchronous standby takes over the "
    "range at its own endpoint with no acknowledged version lost; the groups move to it, the "
    "run reaches the target, and the old primary, back, is superseded (exit 75)") {
  WorkerRun run;
  const std::string replication = "tcp://127.0.0.1:" + std::to_string(freePort());
  const std::string standby_ep = "tcp://127.0.0.1:" + std::to_string(freePort());
  Shards sh(run.dir, 2,
            {"--replication-listen", replication, "--standby-takeover-ms", "1000", "--log-level",
             "debug"});
  // The standby: written its endpoint file once it has the primary's snapshot.
  const std::string standby_file = run.dir + "/standby.ep";
  Process standby({GROUPSGDD_PATH, "--role", "central-shard", "--central-shards", "2",
                   "--shard-index", "1", "--primary", replication, "--listen", standby_ep,
                   "--endpoint-file", standby_file, "--standby-takeover-ms", "1000"},
                  run.dir + "/standby.log");
  REQUIRE_MESSAGE(waitForFile(standby_file, 20000ms), readFile(run.dir + "/standby.log"));
  const std::string primary_ep = sh.endpoints[0];
  std::vector<std::string> args = {"--progress-ms", "0", "--heartbeat-ms", "300", "--mode",
                                   "grouped", "--workers", "4", "--groups", "2", "--target-acc",
                                   "0.80", "--max-seconds", "150", "--central-shards", "2",
                                   "--central-shard-endpoints", primary_ep + "|" + standby_ep,
                                   // Groups give up on a silent shard after 2 s (default 10).
                                   "--exchange-timeout-ms", "2000"};
  run.start(args, DaemonFiles{.control_socket = false});
  for (int i = 0; i < 4; ++i) run.addWorker({"--device-ms", "3"});
  run.addWorker({"--evaluate", "--eval-interval-ms", "200"});
  const auto ranges = mlpRanges(2);
  const std::size_t size = ranges[1].end - ranges[1].begin;
  zmq::context_t ctx(1);
  REQUIRE(waitUntil([&] { return shardVersion(ctx, primary_ep, size) >= 10; }, 60000ms, 100ms));

  const double killed_at = wallNow();
  killHard(*sh.procs[0]);
  const std::string primary_log = readFile(run.dir + "/shard-1.log");
  const std::uint64_t primary_applied = lastApplied(primary_log);
  REQUIRE(primary_applied >= 10);
  REQUIRE(waitUntil(
      [&] { return readFile(run.dir + "/standby.log").find("TAKING OVER") != std::string::npos; },
      10000ms, 20ms));

  json s = run.finish(200000ms);
  INFO("summary: " << s.dump());
  const std::string slog = readFile(run.dir + "/standby.log");
  const std::string head_log = readFile(run.dir + "/daemon.log");
  INFO("standby: " << slog);
  CHECK(s["reached"].get<bool>());
  checkAccounting(s);
  // The standby took over at (at least) every version the primary applied: the primary
  // answered a group only once the standby acknowledged it, so nothing a group was told is
  // lost; at most the one update shipped and not yet applied there is ahead.
  const std::uint64_t resumed = promotedAt(slog);
  CHECK(resumed >= primary_applied);
  CHECK(resumed <= primary_applied + 1);
  CHECK_MESSAGE(head_log.find("central shard 1: moving to " + standby_ep) != std::string::npos,
                head_log);
  CHECK_MESSAGE(head_log.find("acknowledged versions lost") == std::string::npos, head_log);
  // It merged the groups' deltas from then on, at its own endpoint.
  const std::uint64_t after = shardVersion(ctx, standby_ep, size);
  CHECK(after > resumed + 5);
  const double took_over = stampOf(slog, "TAKING OVER");
  const double first_update = stampOf(slog, "takeover: first update applied");
  REQUIRE(took_over > 0);
  REQUIRE(first_update > 0);

  // Fencing: the old primary comes back on its endpoints; the promoted shard tells it it is
  // superseded, and it exits 75 having applied nothing.
  sh.restart(run.dir, 1);
  CHECK(sh.procs[0]->wait(15000ms) == std::optional<int>(75));
  const std::string again_log = readFile(run.dir + "/shard-1-again.log");
  CHECK_MESSAGE(again_log.find("superseded") != std::string::npos, again_log);
  CHECK(again_log.find("applied delta") == std::string::npos);
  std::printf(
      "faults: shard 1 primary SIGKILL at version %llu, its standby promoted at %llu (versions "
      "lost 0: %d); takeover %.2f s after the kill (standby_takeover_ms 1000), first group delta "
      "merged there %.2f s after it (the groups' exchange_timeout_ms 2 s), shard version %llu "
      "at the end; run reached %d, accounting ok %d; old primary back: exit 75\n",
      static_cast<unsigned long long>(primary_applied), static_cast<unsigned long long>(resumed),
      resumed >= primary_applied ? 1 : 0, took_over - killed_at, first_update - killed_at,
      static_cast<unsigned long long>(after), s["reached"].get<bool>() ? 1 : 0,
      s["accounting_ok"].get<bool>() ? 1 : 0);
}

TEST_CASE(
    "faults: a chain of shard standbys: shard 1's primary A SIGKILLed, its standby B (with a "
    "replication_listen of its own) takes over and accepts a new standby C, B SIGKILLed, C "
    "takes over; no acknowledged version lost at either takeover; the groups follow the "
    "list A|B|C and the run spends its budget") {
  WorkerRun run;
  const auto port = [] { return "tcp://127.0.0.1:" + std::to_string(freePort()); };
  const std::string repl_a = port(), repl_b = port(), b_ep = port(), c_ep = port();
  Shards sh(
      run.dir, 2,
      {"--replication-listen", repl_a, "--standby-takeover-ms", "1000", "--log-level", "debug"});
  const std::string a_ep = sh.endpoints[0];
  const auto standby = [&](const std::string& name, const std::string& primary,
                           const std::string& listen, std::vector<std::string> more) {
    std::vector<std::string> argv = {GROUPSGDD_PATH,
                                     "--role",
                                     "central-shard",
                                     "--central-shards",
                                     "2",
                                     "--shard-index",
                                     "1",
                                     "--primary",
                                     primary,
                                     "--listen",
                                     listen,
                                     "--endpoint-file",
                                     run.dir + "/" + name + ".ep",
                                     "--standby-takeover-ms",
                                     "1000",
                                     "--log-level",
                                     "debug"};
    argv.insert(argv.end(), more.begin(), more.end());
    auto p = std::make_unique<Process>(argv, run.dir + "/" + name + ".log");
    // Its endpoint file is written once it has its primary's snapshot.
    REQUIRE_MESSAGE(waitForFile(run.dir + "/" + name + ".ep", 20000ms),
                    readFile(run.dir + "/" + name + ".log"));
    return p;
  };
  auto b = standby("b", repl_a, b_ep, {"--replication-listen", repl_b});
  run.start({"--progress-ms",
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
             "60000",
             "--max-seconds",
             "150",
             "--central-shards",
             "2",
             "--central-shard-endpoints",
             a_ep + "|" + b_ep + "|" + c_ep,
             "--exchange-timeout-ms",
             "2000"},
            DaemonFiles{.control_socket = false});
  for (int i = 0; i < 2; ++i) run.addWorker({"--device-ms", "3"});
  run.addWorker({"--evaluate", "--eval-interval-ms", "300", "--timeout-ms", "2000"});
  const auto ranges = mlpRanges(2);
  const std::size_t size = ranges[1].end - ranges[1].begin;
  zmq::context_t ctx(1);
  const auto tookOver = [&](const std::string& name) {
    return waitUntil(
        [&] { return readFile(run.dir + "/" + name).find("TAKING OVER") != std::string::npos; },
        10000ms, 20ms);
  };
  REQUIRE(waitUntil([&] { return shardVersion(ctx, a_ep, size) >= 10; }, 60000ms, 100ms));

  // A goes; B takes over and, with no standby yet, commits alone.
  killHard(*sh.procs[0]);
  const std::uint64_t a_applied = lastApplied(readFile(run.dir + "/shard-1.log"));
  REQUIRE(a_applied >= 10);
  REQUIRE(tookOver("b.log"));
  const std::string b_then = readFile(run.dir + "/b.log");
  const std::uint64_t b_resumed = promotedAt(b_then);
  CHECK(b_resumed >= a_applied);
  CHECK(b_resumed <= a_applied + 1);
  CHECK(b_then.find("committing alone until one attaches") != std::string::npos);

  // C joins B (snapshot, then the stream); B commits with it.
  auto c = standby("c", repl_b, c_ep, {});
  const std::uint64_t joined = shardVersion(ctx, b_ep, size);
  REQUIRE(waitUntil([&] { return shardVersion(ctx, b_ep, size) >= joined + 10; }, 60000ms, 100ms));
  CHECK(readFile(run.dir + "/b.log").find("standby attached") != std::string::npos);

  // B goes; C takes over from its replica of B.
  killHard(*b);
  const std::uint64_t b_applied = lastApplied(readFile(run.dir + "/b.log"));
  REQUIRE(b_applied >= joined + 10);
  REQUIRE(tookOver("c.log"));

  json s = run.finish(200000ms);
  INFO("summary: " << s.dump());
  const std::string clog = readFile(run.dir + "/c.log");
  const std::string head_log = readFile(run.dir + "/daemon.log");
  INFO("c: " << clog);
  CHECK(s["stop_reason"] == "sample budget spent");
  checkAccounting(s);
  const std::uint64_t c_resumed = promotedAt(clog);
  CHECK(c_resumed >= b_applied);
  CHECK(c_resumed <= b_applied + 1);
  CHECK_MESSAGE(head_log.find("central shard 1: moving to " + b_ep) != std::string::npos, head_log);
  CHECK_MESSAGE(head_log.find("central shard 1: moving to " + c_ep) != std::string::npos, head_log);
  CHECK(head_log.find("acknowledged versions lost") == std::string::npos);
  const std::uint64_t after = shardVersion(ctx, c_ep, size);
  CHECK(after > c_resumed + 5);
  // Fencing along the chain: a shard back on B's replication endpoint is superseded by C.
  Process again(
      {GROUPSGDD_PATH, "--role", "central-shard", "--central-shards", "2", "--shard-index", "1",
       "--listen", "tcp://127.0.0.1:0", "--replication-listen", repl_b},
      run.dir + "/b-again.log");
  CHECK(again.wait(15000ms) == std::optional<int>(75));
  CHECK(readFile(run.dir + "/b-again.log").find("superseded") != std::string::npos);
  std::printf(
      "faults: shard standby chain: A SIGKILL at version %llu, B promoted at %llu; C joined at "
      "%llu; B SIGKILL at version %llu, C promoted at %llu (versions lost 0: %d); shard version "
      "%llu at the end; %llu samples, accounting ok %d\n",
      static_cast<unsigned long long>(a_applied), static_cast<unsigned long long>(b_resumed),
      static_cast<unsigned long long>(joined), static_cast<unsigned long long>(b_applied),
      static_cast<unsigned long long>(c_resumed),
      b_resumed >= a_applied && c_resumed >= b_applied ? 1 : 0,
      static_cast<unsigned long long>(after), llu(s["samples_trained"]),
      s["accounting_ok"].get<bool>() ? 1 : 0);
}

TEST_CASE(
    "faults: a sharded head (shard 0 and the coordinator) SIGKILLed mid-run, its synchronous "
    "standby takes over with no acknowledged version of shard 0 lost and hands out a map "
    "whose shard 0 is itself; the node's groups exchange with shard 1 through it and the run "
    "spends its sample budget with the accounting intact; the promoted head takes consistent "
    "cuts again, numbered above the old head's, and a restart resumes from its cut") {
  const std::string dir = makeTempDir();
  const std::string sdir = dir + "/standby";
  std::filesystem::create_directories(sdir);
  // The primary takes consistent cuts; the standby shares its checkpoint_dir (the worst
  // case: a cut manifest there), yet resumes from its replica, then takes cuts of its own.
  const std::string ckpt = dir + "/ckpt";
  Shards sh(dir, 2, {"--checkpoint-dir", ckpt});
  const std::string shard1 = sh.endpoints[0];
  const std::string replication = "tcp://127.0.0.1:" + std::to_string(freePort());
  const std::string standby_ep = "tcp://127.0.0.1:" + std::to_string(freePort());
  // The head's flags; the standby gets the same ones (it becomes this head).
  const std::vector<std::string> head = withArgs(
      standbyPairHeadArgs("120"),
      {"--central-shards", "2", "--central-shard-endpoints", shard1, "--exchange-timeout-ms",
       "2000", "--checkpoint-dir", ckpt, "--central-cut-interval-s", "0.3"});
  auto primary =
      startDaemon(dir, "primary.log", "tcp://127.0.0.1:0",
                  withArgs(head, {"--replication-listen", replication, "--log-level", "debug"}));
  const std::string primary_ep = endpointIn(dir);
  // With a replication_listen of its own: once promoted, a new standby follows it.
  const std::string replication_b = "tcp://127.0.0.1:" + std::to_string(freePort());
  auto standby = startDaemon(sdir, "standby.log",
                             withArgs(head, {"--role", "standby", "--primary", replication,
                                             "--replication-listen", replication_b}),
                             DaemonFiles{standby_ep, true});
  const std::string list = primary_ep + "," + standby_ep;
  auto node = std::make_unique<Process>(std::vector<std::string>{GROUPSGDD_PATH,
                                                                 "--role",
                                                                 "node",
                                                                 "--coordinator",
                                                                 list,
                                                                 "--node-groups",
                                                                 "2",
                                                                 "--mode",
                                                                 "grouped",
                                                                 "--workers",
                                                                 "2",
                                                                 "--groups",
                                                                 "2",
                                                                 "--step-deadline-ms",
                                                                 "1000",
                                                                 "--give-up-s",
                                                                 "60",
                                                                 "--coordinator-timeout-ms",
                                                                 "500",
                                                                 "--exchange-timeout-ms",
                                                                 "2000"},
                                        dir + "/node.log");
  std::vector<std::unique_ptr<Process>> workers;
  const std::vector<std::string> quick = {"--timeout-ms", "500",         "--backoff-max-ms",
                                          "300",          "--give-up-s", "60"};
  for (int i = 0; i < 2; ++i) workers.push_back(startWorker(dir, list, i, quick));

  json st = waitForStatus(
      dir, [](const json& s) { return s["central_version"].get<std::uint64_t>() >= 30; }, 60000ms);
  REQUIRE(st["central_version"].get<std::uint64_t>() >= 30);
  const auto primary_incarnation = st["incarnation"].get<std::uint64_t>();
  json sst = ctl(sdir, {"status"});
  CHECK(sst["role"] == "standby");
  CHECK(sst["following"] == true);
  REQUIRE(
      waitUntil([&] { return std::filesystem::exists(ckpt + "/shard_cut.json"); }, 20000ms, 50ms));

  const auto ranges = mlpRanges(2);
  const std::size_t size1 = ranges[1].end - ranges[1].begin;
  zmq::context_t ctx(1);
  const double killed_at = wallNow();
  killHard(*primary);
  const std::uint64_t primary_applied = lastApplied(readFile(dir + "/primary.log"));
  REQUIRE(primary_applied >= 30);
  const std::uint64_t shard1_at_kill = shardVersion(ctx, shard1, size1);
  auto old_cut = centralps::readShardCut(ckpt);  // the old head's last
  REQUIRE(old_cut.isOk());

  sst = waitForStatus(
      sdir,
      [](const json& s) {
        return s.contains("workers") && s["workers"]["active"] == 2 &&
               s["samples_trained"].get<std::uint64_t>() > 0;
      },
      30000ms);
  const double back_at = wallNow() - killed_at;
  INFO("standby: " << readFile(sdir + "/standby.log"));
  INFO("node: " << readFile(dir + "/node.log"));
  REQUIRE(sst.contains("workers"));
  CHECK(sst["incarnation"].get<std::uint64_t>() == primary_incarnation + 1);
  // The promoted head's cuts: once both groups exchanged with it, numbered above the old
  // head's, in the manifest of the shared checkpoint_dir.
  REQUIRE_MESSAGE(waitUntil(
                      [&] {
                        auto c = centralps::readShardCut(ckpt);
                        return c.isOk() && c->number > old_cut->number;
                      },
                      30000ms, 50ms),
                  readFile(sdir + "/standby.log"));
  // A new standby follows the promoted sharded head (its snapshot names the same cut).
  const std::string cdir = dir + "/c";
  std::filesystem::create_directories(cdir);
  auto chained =
      startDaemon(cdir, "c.log", withArgs(head, {"--role", "standby", "--primary", replication_b}),
                  DaemonFiles{"tcp://127.0.0.1:" + std::to_string(freePort()), true});
  const json cst = ctl(cdir, {"status"});
  CHECK(cst["following"] == true);
  CHECK(cst["primary_incarnation"].get<std::uint64_t>() == primary_incarnation + 1);

  REQUIRE(standby->wait(150000ms) == std::optional<int>(0));
  // Its primary gone at the end of the run, the chained standby stops on a signal.
  (void)ctl(cdir, {"shutdown"});
  ::kill(chained->pid(), SIGTERM);
  CHECK(chained->wait(15000ms) == std::optional<int>(0));
  CHECK(readFile(cdir + "/c.log").find("following the primary") != std::string::npos);
  CHECK(node->wait(30000ms) == std::optional<int>(0));
  checkWorkersExit(dir, workers, 30000ms);
  const std::string slog = readFile(sdir + "/standby.log");
  const std::string nlog = readFile(dir + "/node.log");
  const double took_over = stampOf(slog, "TAKING OVER");
  const double first_update = stampOf(slog, "takeover: first update applied");
  REQUIRE(took_over > 0);
  REQUIRE(first_update > 0);
  // The promoted head connected to shard 1 as a head does, and handed out a map whose shard 0
  // is its own central PS (the node's fresh group PSes took it).
  CHECK_MESSAGE(slog.find("central shard 1 at " + shard1 + " serves") != std::string::npos, slog);
  // Not taken back to the primary's cut (shard 1 ran on past it); cuts of its own after the
  // takeover, the first numbered above the old head's last.
  CHECK(slog.find("is back at shard cut") == std::string::npos);
  const auto new_cut = centralps::readShardCut(ckpt);
  REQUIRE(new_cut.isOk());
  const auto first_cut = slog.find(" taken: versions");
  REQUIRE(first_cut != std::string::npos);
  const auto first_number_at = slog.rfind("shard cut ", first_cut);
  REQUIRE(first_number_at != std::string::npos);
  const std::uint64_t first_number = std::stoull(slog.substr(first_number_at + 10, 20));
  CHECK(first_number > old_cut->number);
  CHECK(stampOf(slog, " taken: versions") > took_over);
  CHECK(new_cut->number >= first_number);
  CHECK(new_cut->marks.size() == 2);

  json s = readSummary(sdir);
  INFO("summary: " << s.dump());
  checkAccounting(s);
  CHECK(s["stop_reason"] == "sample budget spent");
  const json& hr = s["head_restart"];
  CHECK(hr["took_over_from_incarnation"].get<std::uint64_t>() == primary_incarnation);
  CHECK(hr["versions_lost_bound"] == 0);
  const auto resumed = hr["resumed_version"].get<std::uint64_t>();
  // 0 acknowledged versions of shard 0 lost (shard 0 answered a group only once the standby
  // had the version); at most the one shipped and not yet applied there is ahead.
  CHECK(resumed >= primary_applied);
  CHECK(resumed <= primary_applied + 1);
  // The groups exchanged with both shards through the new head's map: shard 0 (the summary's
  // central version) and shard 1 both merged the exchanges after the takeover.
  const std::uint64_t central = s["central_version"].get<std::uint64_t>();
  const std::uint64_t shard1_end = shardVersion(ctx, shard1, size1);
  INFO("shard 0 " << resumed << " -> " << central << ", shard 1 " << shard1_at_kill << " -> "
                  << shard1_end);
  REQUIRE(central > resumed + 10);
  CHECK((shard1_end - shard1_at_kill) * 10 >= (central - resumed) * 9);
  CHECK(slog.find("acknowledged versions lost") == std::string::npos);
  CHECK(nlog.find("acknowledged versions lost") == std::string::npos);
  CHECK(new_cut->shards[0].version > resumed);  // taken after the takeover
  CHECK(new_cut->shards[0].version <= central);

  // A restart from the promoted head's cut: shard 1 SIGKILLed and started again, and a new
  // head on the same checkpoint_dir, both resume at the cut (not their newest files).
  REQUIRE(::kill(sh.procs[0]->pid(), SIGKILL) == 0);
  REQUIRE(sh.procs[0]->wait(10000ms).has_value());
  sh.restart(dir, 1);
  CHECK(shardVersion(ctx, shard1, size1) == new_cut->shards[1].version);
  CHECK(shardMarks(ctx, shard1) == new_cut->marks);
  const std::string rdir = dir + "/restart";
  std::filesystem::create_directories(rdir);
  auto again = startDaemon(rdir, "head.log",
                           {"--progress-ms", "0", "--mode", "grouped", "--workers", "2", "--groups",
                            "2", "--max-samples", "6000", "--max-seconds", "90", "--central-shards",
                            "2", "--central-shard-endpoints", shard1, "--checkpoint-dir", ckpt},
                           DaemonFiles{.control_socket = false});
  std::vector<std::unique_ptr<Process>> more;
  for (int i = 0; i < 2; ++i) more.push_back(startWorker(rdir, endpointIn(rdir), i, quick));
  REQUIRE_MESSAGE(again->wait(120000ms) == std::optional<int>(0), readFile(rdir + "/head.log"));
  checkWorkersExit(rdir, more, 30000ms);
  const json rs = readSummary(rdir);
  INFO("restart summary: " << rs.dump());
  checkAccounting(rs);
  CHECK(rs["head_restart"]["resumed_version"] == new_cut->shards[0].version);
  CHECK(rs["head_restart"]["resumed_from"] == ckpt + "/" + new_cut->shards[0].file);
  std::printf(
      "faults: sharded head (2 shards) SIGKILL at shard-0 version %llu, its standby resumed at "
      "%llu (versions lost 0: %d), incarnation %llu -> %llu; takeover %.2f s after the kill "
      "(standby_takeover_ms 500), first update merged on the new head %.2f s after it, both "
      "workers on it %.2f s after it; after the takeover shard 0 %llu -> %llu, shard 1 %llu -> "
      "%llu; its first cut %llu %.2f s after the kill (the old head's last %llu), a restart "
      "resumed at its cut %llu; %llu samples, accounting ok %d\n",
      static_cast<unsigned long long>(primary_applied), static_cast<unsigned long long>(resumed),
      resumed >= primary_applied ? 1 : 0, static_cast<unsigned long long>(primary_incarnation),
      llu(hr["incarnation"]), took_over - killed_at, first_update - killed_at, back_at,
      static_cast<unsigned long long>(resumed), static_cast<unsigned long long>(central),
      static_cast<unsigned long long>(shard1_at_kill), static_cast<unsigned long long>(shard1_end),
      static_cast<unsigned long long>(first_number), stampOf(slog, " taken: versions") - killed_at,
      static_cast<unsigned long long>(old_cut->number),
      static_cast<unsigned long long>(new_cut->number), llu(s["samples_trained"]),
      s["accounting_ok"].get<bool>() ? 1 : 0);
  if (std::getenv("KEEPDIR") == nullptr) {
    removeTestDir(dir);
  } else {
    std::printf("kept %s\n", dir.c_str());
  }
}

TEST_CASE(
    "faults: a head gathering its shards from node daemons, with a standby: the head "
    "SIGKILLed, the standby takes over and gathers shard 1 again from the node, which moves "
    "to it; no acknowledged version of shard 0 lost, the run spends its budget") {
  const std::string dir = makeTempDir();
  const std::string sdir = dir + "/standby";
  std::filesystem::create_directories(sdir);
  const std::string replication = "tcp://127.0.0.1:" + std::to_string(freePort());
  const std::string standby_ep = "tcp://127.0.0.1:" + std::to_string(freePort());
  // No central_shard_endpoints: the node daemon below offers shard 1 to whichever head.
  const std::vector<std::string> head =
      withArgs(standbyPairHeadArgs("120"),
               {"--central-shards", "2", "--give-up-s", "60", "--exchange-timeout-ms", "2000"});
  auto primary =
      startDaemon(dir, "primary.log", "tcp://127.0.0.1:0",
                  withArgs(head, {"--replication-listen", replication, "--log-level", "debug"}));
  const std::string primary_ep = endpointIn(dir);
  const std::string list = primary_ep + "," + standby_ep;
  auto node = std::make_unique<Process>(std::vector<std::string>{GROUPSGDD_PATH,
                                                                 "--role",
                                                                 "node",
                                                                 "--coordinator",
                                                                 list,
                                                                 "--node-groups",
                                                                 "2",
                                                                 "--mode",
                                                                 "grouped",
                                                                 "--workers",
                                                                 "2",
                                                                 "--groups",
                                                                 "2",
                                                                 "--central-shards",
                                                                 "2",
                                                                 "--node-central-shard",
                                                                 "1",
                                                                 "--step-deadline-ms",
                                                                 "1000",
                                                                 "--give-up-s",
                                                                 "60",
                                                                 "--coordinator-timeout-ms",
                                                                 "500",
                                                                 "--exchange-timeout-ms",
                                                                 "2000"},
                                        dir + "/node.log");
  // The primary's central PS starts once the node offered shard 1; the standby's endpoint
  // file is written at its first snapshot.
  auto standby = startDaemon(sdir, "standby.log",
                             withArgs(head, {"--role", "standby", "--primary", replication}),
                             DaemonFiles{standby_ep, true});
  std::vector<std::unique_ptr<Process>> workers;
  const std::vector<std::string> quick = {"--timeout-ms", "500",         "--backoff-max-ms",
                                          "300",          "--give-up-s", "60"};
  for (int i = 0; i < 2; ++i) workers.push_back(startWorker(dir, list, i, quick));
  json st = waitForStatus(
      dir, [](const json& s) { return s["central_version"].get<std::uint64_t>() >= 30; }, 60000ms);
  REQUIRE(st["central_version"].get<std::uint64_t>() >= 30);
  const auto primary_incarnation = st["incarnation"].get<std::uint64_t>();

  const double killed_at = wallNow();
  killHard(*primary);
  const std::uint64_t primary_applied = lastApplied(readFile(dir + "/primary.log"));
  REQUIRE(primary_applied >= 30);
  json sst = waitForStatus(
      sdir,
      [](const json& s) {
        return s.contains("workers") && s["workers"]["active"] == 2 &&
               s["samples_trained"].get<std::uint64_t>() > 0;
      },
      30000ms);
  const double back_at = wallNow() - killed_at;
  INFO("standby: " << readFile(sdir + "/standby.log"));
  INFO("node: " << readFile(dir + "/node.log"));
  REQUIRE(sst.contains("workers"));
  CHECK(sst["incarnation"].get<std::uint64_t>() == primary_incarnation + 1);

  REQUIRE(standby->wait(150000ms) == std::optional<int>(0));
  CHECK(node->wait(30000ms) == std::optional<int>(0));
  checkWorkersExit(dir, workers, 30000ms);
  const std::string slog = readFile(sdir + "/standby.log");
  CHECK(slog.find("offered by node") != std::string::npos);  // gathered again
  json s = readSummary(sdir);
  INFO("summary: " << s.dump());
  checkAccounting(s);
  CHECK(s["stop_reason"] == "sample budget spent");
  const json& hr = s["head_restart"];
  CHECK(hr["took_over_from_incarnation"].get<std::uint64_t>() == primary_incarnation);
  CHECK(hr["versions_lost_bound"] == 0);
  const auto resumed = hr["resumed_version"].get<std::uint64_t>();
  CHECK(resumed >= primary_applied);
  CHECK(resumed <= primary_applied + 1);
  const std::uint64_t central = s["central_version"].get<std::uint64_t>();
  CHECK(central > resumed + 10);
  // The node's shard merged the groups' exchanges through the new head's map as well (its
  // last line: "central PS stopped at version N").
  const std::string nlog = readFile(dir + "/node.log");
  const std::string stopped = "central PS stopped at version ";
  const auto at = nlog.rfind(stopped);
  REQUIRE(at != std::string::npos);
  const std::uint64_t shard1 = std::strtoull(nlog.c_str() + at + stopped.size(), nullptr, 10);
  CHECK(shard1 * 10 >= central * 9);
  std::printf(
      "faults: sharded head with node-hosted shard 1 SIGKILL at shard-0 version %llu, its "
      "standby resumed at %llu (versions lost 0: %d) and gathered shard 1 again from the node; "
      "both workers on it %.2f s after the kill; shard 0 %llu -> %llu; %llu samples, "
      "accounting ok %d\n",
      static_cast<unsigned long long>(primary_applied), static_cast<unsigned long long>(resumed),
      resumed >= primary_applied ? 1 : 0, back_at, static_cast<unsigned long long>(resumed),
      static_cast<unsigned long long>(central), llu(s["samples_trained"]),
      s["accounting_ok"].get<bool>() ? 1 : 0);
  if (std::getenv("KEEPDIR") == nullptr) {
    removeTestDir(dir);
  } else {
    std::printf("kept %s\n", dir.c_str());
  }
}

namespace {

// Every file under dir with its size (what a refused restart must leave as it was).
std::map<std::string, std::uintmax_t> filesUnder(const std::string& dir) {
  std::map<std::string, std::uintmax_t> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files[e.path().string()] = e.file_size();
  }
  return files;
}

// Every figure after `key` in a head's log ("deltas held at most X ms", "the whole cut X").
std::vector<double> figuresAfter(const std::string& log, const std::string& key) {
  std::vector<double> out;
  for (auto at = log.find(key); at != std::string::npos; at = log.find(key, at + 1)) {
    out.push_back(std::stod(log.substr(at + key.size(), 16)));
  }
  return out;
}

}  // namespace

TEST_CASE(
    "central shards: the head and every shard SIGKILLed after a consistent cut and restarted "
    "resume at the cut, with equal marks, and reach the target with the accounting intact") {
  const std::string dir = makeTempDir();
  const std::string ckpt = dir + "/ckpt";
  constexpr std::size_t kShards = 3;
  // Each shard also writes its own checkpoints, often: a restart must not take those.
  Shards sh(dir, kShards, {"--checkpoint-dir", ckpt, "--checkpoint-interval-s", "0.2"});
  const auto headArgs = [&](std::vector<std::string> more) {
    std::vector<std::string> a = {"--progress-ms",
                                  "0",
                                  "--heartbeat-ms",
                                  "300",
                                  "--mode",
                                  "grouped",
                                  "--workers",
                                  "4",
                                  "--groups",
                                  "2",
                                  "--checkpoint-dir",
                                  ckpt,
                                  "--checkpoint-interval-s",
                                  "0.2",
                                  "--central-cut-interval-s",
                                  "0.3"};
    for (const auto& f : sh.headFlags()) a.push_back(f);
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  const auto worker = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> argv = {WORKER_PATH, "--coordinator", endpointIn(dir)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Process>(argv, dir + "/" + name + ".log");
  };
  std::string first_log;
  {
    auto head = startDaemon(dir, "head-1.log", headArgs({"--max-seconds", "120"}),
                            DaemonFiles{.control_socket = false});
    std::vector<std::unique_ptr<Process>> workers;
    for (int i = 0; i < 4; ++i)
      workers.push_back(worker("w" + std::to_string(i), {"--device-ms", "2"}));
    REQUIRE_MESSAGE(waitUntil(
                        [&] {
                          auto c = centralps::readShardCut(ckpt);
                          return c.isOk() && c->number >= 2;
                        },
                        60000ms),
                    readFile(dir + "/head-1.log"));
    std::this_thread::sleep_for(300ms);  // mid-run: between cuts, deltas flowing
    REQUIRE(::kill(head->pid(), SIGKILL) == 0);
    CHECK(head->wait(10000ms) == std::optional<int>(-SIGKILL));
    first_log = readFile(dir + "/head-1.log");
  }                                    // the workers are SIGKILLed with it
  for (auto& p : sh.procs) p.reset();  // and every shard
  auto cut = centralps::readShardCut(ckpt);
  REQUIRE_MESSAGE(cut.isOk(), cut.status().toString());
  REQUIRE(cut->shards.size() == kShards);
  CHECK(cut->marks.size() == 2);  // both groups' exchanges are in it
  for (std::size_t k = 0; k < kShards; ++k) {
    CHECK(std::filesystem::exists(ckpt + "/" + cut->shards[k].file));
  }
  // Restarted shards resume at the cut's version for them, not their own newest file.
  const auto ranges = mlpRanges(kShards);
  zmq::context_t ctx(1);
  for (std::size_t k = 1; k < kShards; ++k) sh.restart(dir, k);
  for (std::size_t k = 1; k < kShards; ++k) {
    const std::size_t size = ranges[k].end - ranges[k].begin;
    CHECK(shardVersion(ctx, sh.endpoints[k - 1], size) == cut->shards[k].version);
    CHECK(shardMarks(ctx, sh.endpoints[k - 1]) == cut->marks);
    const std::string log = readFile(dir + "/shard-" + std::to_string(k) + "-again.log");
    CHECK_MESSAGE(log.find("resumed from " + ckpt + "/" + cut->shards[k].file) != std::string::npos,
                  log);
  }
  auto head =
      startDaemon(dir, "head-2.log", headArgs({"--target-acc", "0.85", "--max-seconds", "120"}),
                  DaemonFiles{.control_socket = false});
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 4; ++i)
    workers.push_back(worker("v" + std::to_string(i), {"--device-ms", "2"}));
  workers.push_back(worker("evaluator", {"--evaluate", "--eval-interval-ms", "200"}));
  auto rc = head->wait(150000ms);
  const std::string log = readFile(dir + "/head-2.log");
  INFO("head: " << log);
  REQUIRE(rc == std::optional<int>(0));
  for (auto& w : workers) CHECK(w->wait(30000ms) == std::optional<int>(0));
  const json s = json::parse(readFile(dir + "/summary.json"));
  INFO("summary: " << s.dump());
  CHECK(s["reached"] == true);
  checkAccounting(s);
  const json& restart = s["head_restart"];
  REQUIRE(restart.is_object());
  CHECK(restart["resumed_version"] == cut->shards[0].version);
  CHECK(restart["resumed_from"] == ckpt + "/" + cut->shards[0].file);
  // Cuts went on from the resumed one's number; the manifest names a later one now.
  auto last = centralps::readShardCut(ckpt);
  REQUIRE(last.isOk());
  CHECK(last->number > cut->number);
  std::vector<double> pauses = figuresAfter(first_log + log, "deltas held at most ");
  std::vector<double> wholes = figuresAfter(first_log + log, "the whole cut ");
  REQUIRE(!pauses.empty());
  REQUIRE(wholes.size() == pauses.size());
  std::sort(pauses.begin(), pauses.end());
  std::sort(wholes.begin(), wholes.end());
  std::printf(
      "consistent cut: %zu shards, cut %llu resumed at versions %llu/%llu/%llu; deltas held per "
      "cut (freeze to unfreeze, the longest shard) median %.2f ms, max %.2f ms over %zu cuts; "
      "the whole cut (files durable, manifest written) median %.1f ms, max %.1f ms\n",
      kShards, static_cast<unsigned long long>(cut->number),
      static_cast<unsigned long long>(cut->shards[0].version),
      static_cast<unsigned long long>(cut->shards[1].version),
      static_cast<unsigned long long>(cut->shards[2].version), pauses[pauses.size() / 2],
      pauses.back(), pauses.size(), wholes[wholes.size() / 2], wholes.back());
  workers.clear();
  head.reset();
  sh.procs.clear();
  reportDone(dir);
}

TEST_CASE(
    "central shards: a restart refuses a cut that is incomplete, tampered or not the shards', "
    "naming the shard and deleting nothing") {
  const std::string dir = makeTempDir();
  const std::string ckpt = dir + "/ckpt";
  const auto ranges = mlpRanges(2);
  // A cut of both shards of the mlp (seed 1), written as the head and a shard would.
  auto model = kernels::makeModel(kernels::ModelKind::kMlp);
  std::vector<float> whole(model->paramCount());
  model->init(whole, 1);
  centralps::ShardCut cut;
  cut.number = 4;
  cut.model = "mlp";
  cut.split = "tensors";
  cut.seed = 1;
  cut.marks = {{0, 1000}, {1, 2000}};
  const std::uint64_t versions[] = {12, 11};
  std::filesystem::create_directories(ckpt + "/shard-1");
  for (std::size_t k = 0; k < 2; ++k) {
    cut.shards.push_back(
        {ranges[k].begin, ranges[k].end, versions[k], centralps::cutFileFor(k, cut.number)});
    REQUIRE(centralps::writeCheckpointFile(ckpt + "/" + cut.shards[k].file, versions[k],
                                           std::span<const float>(whole).subspan(
                                               ranges[k].begin, ranges[k].end - ranges[k].begin))
                .isOk());
  }
  REQUIRE(centralps::writeShardCut(ckpt, cut).isOk());
  const auto shardArgv = [&](const std::string& checkpoint_dir, const std::string& ep_file) {
    return std::vector<std::string>{GROUPSGDD_PATH,
                                    "--role",
                                    "central-shard",
                                    "--central-shards",
                                    "2",
                                    "--shard-index",
                                    "1",
                                    "--listen",
                                    "tcp://127.0.0.1:0",
                                    "--endpoint-file",
                                    ep_file,
                                    "--checkpoint-dir",
                                    checkpoint_dir};
  };
  const auto refused = [&](const std::string& name, std::vector<std::string> argv) {
    Process p(argv, dir + "/" + name + ".log");
    auto rc = p.wait(30000ms);
    REQUIRE_MESSAGE(rc.has_value(), name << " did not exit");
    CHECK(*rc != 0);
    return readFile(dir + "/" + name + ".log");
  };
  const auto headArgv = [&](const std::string& shard_ep) {
    return std::vector<std::string>{GROUPSGDD_PATH,
                                    "--listen",
                                    "tcp://127.0.0.1:0",
                                    "--progress-ms",
                                    "0",
                                    "--checkpoint-dir",
                                    ckpt,
                                    "--central-shards",
                                    "2",
                                    "--central-shard-endpoints",
                                    shard_ep,
                                    "--give-up-s",
                                    "5"};
  };
  const auto before = filesUnder(ckpt);
  SUBCASE("the cut as written: the shard serves its version") {
    Process shard(shardArgv(ckpt, dir + "/ok.ep"), dir + "/ok.log");
    REQUIRE_MESSAGE(waitForFile(dir + "/ok.ep", 20000ms), readFile(dir + "/ok.log"));
    std::string ep = readFile(dir + "/ok.ep");
    ep.erase(ep.find_last_not_of("\n") + 1);
    zmq::context_t ctx(1);
    CHECK(shardVersion(ctx, ep, ranges[1].end - ranges[1].begin) == 11);
    CHECK(shardMarks(ctx, ep) == cut.marks);
  }
  SUBCASE("a shard's file missing") {
    const std::string gone = ckpt + "/" + cut.shards[1].file;
    std::filesystem::rename(gone, dir + "/moved-away");
    const std::string log = refused("missing", shardArgv(ckpt, dir + "/missing.ep"));
    CHECK_MESSAGE(log.find("central shard 1 cannot resume") != std::string::npos, log);
    CHECK_MESSAGE(
        log.find("shard cut 4, shard 1 (" + gone + "): file missing") != std::string::npos, log);
    std::filesystem::rename(dir + "/moved-away", gone);
    CHECK(filesUnder(ckpt) == before);
  }
  SUBCASE("the head's own file missing") {
    const std::string gone = ckpt + "/" + cut.shards[0].file;
    std::filesystem::rename(gone, dir + "/moved-away");
    const std::string log = refused("head-missing", headArgv("tcp://127.0.0.1:9"));
    CHECK_MESSAGE(log.find("central shard 0 cannot resume") != std::string::npos, log);
    CHECK_MESSAGE(log.find("file missing") != std::string::npos, log);
    std::filesystem::rename(dir + "/moved-away", gone);
    CHECK(filesUnder(ckpt) == before);
  }
  SUBCASE("a tampered manifest") {
    const std::string path = ckpt + "/" + centralps::kShardCutFile;
    std::string text = readFile(path);
    const auto at = text.find("\"version\": 11");
    REQUIRE(at != std::string::npos);
    text.replace(at, 13, "\"version\": 12");
    { std::ofstream(path) << text; }
    const auto edited = filesUnder(ckpt);
    std::string log = refused("tampered-shard", shardArgv(ckpt, dir + "/t.ep"));
    CHECK_MESSAGE(log.find("central shard 1 cannot resume") != std::string::npos, log);
    CHECK_MESSAGE(log.find("crc32 does not match") != std::string::npos, log);
    log = refused("tampered-head", headArgv("tcp://127.0.0.1:9"));
    CHECK_MESSAGE(log.find("central shard 0 cannot resume") != std::string::npos, log);
    CHECK_MESSAGE(log.find("crc32 does not match") != std::string::npos, log);
    CHECK(filesUnder(ckpt) == edited);
    REQUIRE(centralps::writeShardCut(ckpt, cut).isOk());
  }
  SUBCASE("a shard started without the manifest: the head brings it back to the cut") {
    const std::string elsewhere = dir + "/elsewhere";
    std::filesystem::create_directories(elsewhere + "/shard-1");
    std::filesystem::copy_file(ckpt + "/" + cut.shards[1].file,
                               elsewhere + "/" + cut.shards[1].file);
    Process shard(shardArgv(elsewhere, dir + "/e.ep"), dir + "/e.log");
    REQUIRE_MESSAGE(waitForFile(dir + "/e.ep", 20000ms), readFile(dir + "/e.log"));
    std::string ep = readFile(dir + "/e.ep");
    ep.erase(ep.find_last_not_of("\n") + 1);
    zmq::context_t ctx(1);
    CHECK(shardVersion(ctx, ep, ranges[1].end - ranges[1].begin) == 0);  // its initial slice
    Process head(headArgv(ep), dir + "/head-back.log");
    CHECK_MESSAGE(
        waitForText(dir + "/head-back.log", "is back at shard cut 4 (version 11)", 20000ms),
        readFile(dir + "/head-back.log"));
    CHECK(shardVersion(ctx, ep, ranges[1].end - ranges[1].begin) == 11);
    CHECK(shardMarks(ctx, ep) == cut.marks);
  }
  SUBCASE("a shard without its file of the cut: the head refuses it") {
    const std::string elsewhere = dir + "/elsewhere";
    Process shard(shardArgv(elsewhere, dir + "/e.ep"), dir + "/e.log");
    REQUIRE_MESSAGE(waitForFile(dir + "/e.ep", 20000ms), readFile(dir + "/e.log"));
    std::string ep = readFile(dir + "/e.ep");
    ep.erase(ep.find_last_not_of("\n") + 1);
    const std::string log = refused("head-other", headArgv(ep));
    CHECK_MESSAGE(log.find("central shard 1 at " + ep + ": ") != std::string::npos, log);
    CHECK_MESSAGE(log.find("cannot return to shard cut 4") != std::string::npos, log);
    CHECK(filesUnder(ckpt) == before);
  }
  // Nothing the cut names was deleted or changed (a head that ran wrote its own state).
  const auto after = filesUnder(ckpt);
  for (const auto& [file, size] : before) {
    CHECK_MESSAGE(after.count(file) == 1, file);
    if (after.count(file) == 1) CHECK(after.at(file) == size);
  }
  removeTestDir(dir);
}
