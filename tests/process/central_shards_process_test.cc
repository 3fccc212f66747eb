// Central shards (docs/shards.md) across real processes on TCP loopback: shards 1..S-1 are
// groupsgdd --role central-shard processes, the head serves shard 0 and hands out the
// shard map; group PSes exchange with every shard and evaluators read every shard.
#include <doctest/doctest.h>

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
}
