// keep_best at the central PS: it keeps the models it served to evaluators, writes the
// one the coordinator names to a file in the checkpoint format, and refuses a version it
// no longer holds or a request while keep_best is off.
#include <doctest/doctest.h>

#include <chrono>
#include <vector>

#include "groupsgd/centralps/central_server.h"
#include "groupsgd/centralps/checkpoint.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/testbed/server_thread.h"
#include "support/temp_dir.h"

using namespace groupsgd;
using namespace groupsgd::centralps;
using namespace std::chrono_literals;

namespace {

constexpr auto kTimeout = 5000ms;

struct KeepingCentral {
  zmq::context_t ctx{1};
  CentralConfig cfg;
  std::unique_ptr<testbed::ServerThread<CentralServer>> server;
  std::unique_ptr<RpcClient> client;

  explicit KeepingCentral(bool keep_best) {
    cfg.param_count = 16;
    cfg.keep_best = keep_best;
    cfg.sample_weighting = false;
    auto s = CentralServer::create(ctx, cfg, "tcp://127.0.0.1:*");
    REQUIRE(s.isOk());
    client = std::make_unique<RpcClient>(ctx, (*s)->endpoint(), cfg.limits);
    server = std::make_unique<testbed::ServerThread<CentralServer>>(std::move(*s));
  }
  ~KeepingCentral() {
    client.reset();
    server.reset();
  }

  // An evaluator's fetch (or another's): the model and its version.
  std::pair<std::uint64_t, std::vector<float>> fetch(bool evaluation) {
    OutMessage out(cfg.limits.job_id, 0);
    out.header().getBody().initFetch().setEvaluation(evaluation);
    auto reply = client->call(std::move(out), kTimeout);
    REQUIRE(reply.isOk());
    REQUIRE(reply->kind() == BodyKind::MODEL_REPLY);
    std::vector<float> model(cfg.param_count);
    REQUIRE(reply->readTensor(0, model).isOk());
    return {reply->header().getModelVersion(), model};
  }

  void push(std::uint64_t base, float value) {
    OutMessage out(cfg.limits.job_id, 1);
    out.header().setModelVersion(base);
    auto body = out.header().getBody().initDeltaPush();
    body.setGroupId(1);
    body.setSamples(8);
    body.setSteps(1);
    out.addTensor(std::make_shared<const std::vector<float>>(cfg.param_count, value));
    auto reply = client->call(std::move(out), kTimeout);
    REQUIRE(reply.isOk());
    REQUIRE(reply->kind() == BodyKind::MODEL_REPLY);
  }

  // The answer to "write version v to path": ok and the path, or the refusal's text.
  std::string keep(std::uint64_t version, const std::string& path) {
    OutMessage out(cfg.limits.job_id, 0);
    auto req = out.header().getBody().initCheckpointRequest();
    req.setBest(true);
    req.setBestVersion(version);
    req.setBestPath(path);
    auto reply = client->call(std::move(out), kTimeout);
    if (!reply) return "refused: " + reply.status().message();
    if (reply->kind() == BodyKind::ERROR) {
      return std::string("refused: ") + reply->header().getBody().getError().getMessage().cStr();
    }
    REQUIRE(reply->kind() == BodyKind::CHECKPOINT_DONE);
    auto d = reply->header().getBody().getCheckpointDone();
    if (!d.getOk()) return std::string("failed: ") + d.getError().cStr();
    CHECK(d.getVersion() == version);
    return d.getPath().cStr();
  }
};

}  // namespace

TEST_CASE("keep_best: the central PS writes the served version named, not the current one") {
  testing::TempDir dir;
  KeepingCentral c(true);
  auto [v0, m0] = c.fetch(true);
  CHECK(v0 == 0);
  c.push(0, 0.5f);
  auto [v1, m1] = c.fetch(true);
  REQUIRE(v1 == 1);
  c.push(1, 0.25f);  // version 2 is current; 1 was the one evaluated
  const std::string path = dir.file("best.ckpt");
  CHECK(c.keep(1, path) == path);
  auto loaded = readCheckpointFile(path, c.cfg.param_count);
  REQUIRE(loaded.isOk());
  CHECK(loaded->version == 1);
  CHECK(loaded->params == m1);
  CHECK(loaded->params != m0);
  // A later best replaces the file; the directory's loader never takes it for a checkpoint.
  CHECK(c.keep(0, path) == path);
  CHECK(readCheckpointFile(path, 0)->version == 0);
  CHECK(listCheckpoints(dir.path())->empty());
}

TEST_CASE("keep_best: a version not served to an evaluator, or long gone, is refused") {
  testing::TempDir dir;
  KeepingCentral c(true);
  c.fetch(false);  // a group PS's fetch is not kept
  CHECK(c.keep(0, dir.file("best.ckpt")).rfind("refused: ", 0) == 0);
  for (std::uint64_t v = 0; v < 6; ++v) {
    c.fetch(true);
    c.push(v, 0.1f);
  }
  // Four evaluated versions are kept (2..5); 0 and 1 are gone.
  CHECK(c.keep(1, dir.file("best.ckpt")).find("no longer held") != std::string::npos);
  CHECK(c.keep(5, dir.file("best.ckpt")) == dir.file("best.ckpt"));
  CHECK(c.keep(5, "").rfind("refused: ", 0) == 0);
  // A directory that does not exist: the write fails and says so.
  CHECK(c.keep(5, dir.file("missing/best.ckpt")).rfind("failed: ", 0) == 0);
}

TEST_CASE("keep_best: off, a best-model request is refused and nothing is kept") {
  testing::TempDir dir;
  KeepingCentral c(false);
  c.fetch(true);
  CHECK(c.keep(0, dir.file("best.ckpt")).find("keep_best is off") != std::string::npos);
  CHECK(dir.entries() == 0);
}
