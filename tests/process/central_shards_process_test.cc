// Central shards (docs/shards.md) across real processes on TCP loopback: shards 1..S-1 are
// groupsgdd --role central-shard processes, the head serves shard 0 and hands out the
// shard map; group PSes exchange with every shard and evaluators read every shard.
#include <doctest/doctest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon_harness.h"
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
  SUBCASE("a shard standby for shard 0, or with a standby of its own") {
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
    log = refused("standby-chain",
                  {"--shard-index", "1", "--replication-listen", "tcp://127.0.0.1:9"});
    CHECK_MESSAGE(log.find("takes over without a standby of its own") != std::string::npos, log);
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
