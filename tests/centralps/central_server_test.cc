// The central PS over real loopback sockets: the server runs on a ServerThread, the test
// talks to it with RpcClient exactly as a group PS would.
#include "groupsgd/centralps/central_server.h"

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "centralps_test_util.h"
#include "groupsgd/centralps/checkpoint.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/kernels/model.h"
#include "groupsgd/testbed/server_thread.h"
#include "support/temp_dir.h"

using namespace groupsgd;
using namespace groupsgd::centralps;
using namespace std::chrono_literals;
using centralps::testing::bitIdentical;
using groupsgd::testbed::ServerThread;

namespace {

constexpr auto kTimeout = 5000ms;

CentralConfig softmaxConfig() {
  CentralConfig cfg;
  cfg.model = kernels::ModelKind::kSoftmax;
  cfg.seed = 3;
  return cfg;
}

std::vector<float> initialModel(const CentralConfig& cfg) {
  auto model = kernels::makeModel(cfg.model);
  std::vector<float> v(model->paramCount());
  model->init(v, cfg.seed);
  return v;
}

// A central PS on its own thread plus a client bound to it. Members are destroyed in
// reverse order: client socket, then the server thread, then the context.
struct Central {
  zmq::context_t ctx{1};
  CentralConfig cfg;
  std::unique_ptr<ServerThread<CentralServer>> server;
  std::unique_ptr<RpcClient> client;
  std::size_t params = 0;

  explicit Central(CentralConfig c) : cfg(c) {
    auto s = CentralServer::create(ctx, cfg, "tcp://127.0.0.1:*");
    REQUIRE(s.isOk());
    params = (*s)->paramCount();
    client = std::make_unique<RpcClient>(ctx, (*s)->endpoint(), cfg.limits);
    server = std::make_unique<ServerThread<CentralServer>>(std::move(*s));
  }
  ~Central() {
    client.reset();
    server.reset();
  }

  Result<InMessage> fetch() {
    OutMessage out(cfg.limits.job_id, 0);
    out.header().getBody().initFetch();
    return client->call(std::move(out), kTimeout);
  }

  Result<InMessage> push(std::uint32_t group, std::uint64_t base_version, std::uint64_t samples,
                         std::vector<float> delta) {
    OutMessage out(cfg.limits.job_id, group);
    out.header().setModelVersion(base_version);
    auto body = out.header().getBody().initDeltaPush();
    body.setGroupId(group);
    body.setSamples(samples);
    body.setSteps(1);
    out.addTensor(std::make_shared<const std::vector<float>>(std::move(delta)));
    return client->call(std::move(out), kTimeout);
  }

  Result<InMessage> stats() {
    OutMessage out(cfg.limits.job_id, 0);
    out.header().getBody().initCentralStatsQuery();
    return client->call(std::move(out), kTimeout);
  }

  std::vector<float> model(const InMessage& reply) const {
    REQUIRE(reply.kind() == BodyKind::MODEL_REPLY);
    REQUIRE(reply.tensorCount() == 1);
    std::vector<float> out(params);
    REQUIRE(reply.readTensor(0, out).isOk());
    return out;
  }
};

std::vector<float> smallDelta(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  return centralps::testing::randomVector(n, rng, 0.01f);
}

// The ModelReply a push was answered with (a refusal by policy is one too, not an
// ErrorReply).
proto::ModelReply::Reader modelReplyOf(const Result<InMessage>& reply) {
  REQUIRE(reply.isOk());
  REQUIRE(reply->kind() == BodyKind::MODEL_REPLY);
  return reply->header().getBody().getModelReply();
}

}  // namespace

TEST_CASE("central server: Fetch returns version 0 and the initial model of paramCount elements") {
  Central c(softmaxConfig());
  const auto init = initialModel(c.cfg);
  CHECK(c.params == init.size());
  CHECK(c.params == 7850);  // softmax: 10 x 784 + 10
  auto reply = c.fetch();
  REQUIRE(reply.isOk());
  CHECK(reply->kind() == BodyKind::MODEL_REPLY);
  CHECK(reply->header().getModelVersion() == 0);
  CHECK_FALSE(reply->header().getBody().getModelReply().getApplied());
  REQUIRE(reply->tensorCount() == 1);
  CHECK(reply->tensorElements(0) == c.params);
  CHECK(bitIdentical(c.model(*reply), init));
}

TEST_CASE("central server: param_count serves a zero model of that size and merges into it") {
  auto cfg = softmaxConfig();
  cfg.param_count = 1100003;   // not a model size; over one 4 MiB chunk, so two frames
  cfg.part_bytes = 16u << 20;  // and under the part size: this client reads whole replies
  Central c(cfg);
  CHECK(c.params == 1100003);
  auto reply = c.fetch();
  REQUIRE(reply.isOk());
  CHECK(reply->header().getModelVersion() == 0);
  REQUIRE(reply->tensorCount() == 1);
  CHECK(reply->tensorElements(0) == 1100003);
  CHECK(bitIdentical(c.model(*reply), std::vector<float>(1100003, 0.0f)));

  const auto delta = smallDelta(c.params, 7);
  auto applied = c.push(/*group=*/0, /*base=*/0, /*samples=*/32, delta);
  REQUIRE(applied.isOk());
  CHECK(applied->header().getBody().getModelReply().getApplied());
  CHECK(applied->header().getModelVersion() == 1);
  CHECK(bitIdentical(c.model(*applied), delta));  // 0 + 1 * delta

  // A delta of the model's old size is refused: the size is param_count, not the model's.
  auto wrong = c.push(0, 1, 32, smallDelta(7850, 8));
  CHECK_FALSE(wrong.isOk());
  CHECK(wrong.status().code() == Code::kInvalidArgument);
}

TEST_CASE("central server: a fresh delta is applied and the reply carries init + delta") {
  Central c(softmaxConfig());
  const auto init = initialModel(c.cfg);
  const auto delta = smallDelta(c.params, 1);
  auto reply = c.push(/*group=*/2, /*base=*/0, /*samples=*/64, delta);
  auto mr = modelReplyOf(reply);
  CHECK(mr.getApplied());
  CHECK(std::string(mr.getReason().cStr()).empty());
  CHECK(mr.getStaleness() == 0);
  CHECK(mr.getWeight() == 1.0f);
  CHECK(reply->header().getModelVersion() == 1);
  std::vector<float> expect(c.params);
  for (std::size_t i = 0; i < c.params; ++i) expect[i] = init[i] + delta[i];
  CHECK(bitIdentical(c.model(*reply), expect));

  // A later Fetch sees the same version and model.
  auto f = c.fetch();
  REQUIRE(f.isOk());
  CHECK(f->header().getModelVersion() == 1);
  CHECK(bitIdentical(c.model(*f), expect));
}

TEST_CASE("central server: a stale delta is weighted by f(tau) and reports tau") {
  Central c(softmaxConfig());  // inverse rule
  const auto init = initialModel(c.cfg);
  std::vector<float> d1(c.params, 0.0f), d2(c.params, 0.0f);
  d1[0] = 0.5f;
  d2[0] = 0.25f;
  d2[1] = 1.0f;
  REQUIRE(c.push(0, 0, 8, d1).isOk());
  auto reply = c.push(1, /*base=*/0, 8, d2);  // tau = 1 -> weight 1/2
  REQUIRE(reply.isOk());
  auto mr = reply->header().getBody().getModelReply();
  CHECK(mr.getApplied());
  CHECK(mr.getStaleness() == 1);
  CHECK(mr.getWeight() == 0.5f);
  CHECK(reply->header().getModelVersion() == 2);
  auto m = c.model(*reply);
  CHECK(m[0] == (init[0] + 0.5f) + 0.125f);
  CHECK(m[1] == init[1] + 0.5f);
  CHECK(m[2] == init[2]);
}

TEST_CASE(
    "central server: a big group's delta after a small group's counts almost fully (staleness in "
    "samples); versions halve it") {
  for (StalenessMeasure measure : {StalenessMeasure::kSamples, StalenessMeasure::kVersions}) {
    CAPTURE(stalenessMeasureName(measure));
    CentralConfig cfg = softmaxConfig();
    cfg.staleness.measure = measure;
    Central c(cfg);
    REQUIRE(c.push(0, 0, 1792, smallDelta(c.params, 1)).isOk());  // the big group: v1
    REQUIRE(c.push(1, 0, 64, smallDelta(c.params, 2)).isOk());    // the straggler, based on v0
    // The big group's next delta, based on its own last version (v1): one small delta of
    // 64 samples merged since, against a mean delta of 0.9 * 1792 + 0.1 * 64 = 1619.2.
    auto reply = c.push(0, 1, 1792, smallDelta(c.params, 3));
    REQUIRE(reply.isOk());
    auto mr = reply->header().getBody().getModelReply();
    CHECK(mr.getApplied());
    CHECK(mr.getStaleness() == 1);  // reported and bounded in versions either way
    if (measure == StalenessMeasure::kSamples) {
      CHECK(mr.getWeight() == doctest::Approx(1.0 / (1.0 + 64.0 / 1619.2)));
    } else {
      CHECK(mr.getWeight() == 0.5f);
    }
  }
}

TEST_CASE("central server: a delta staler than max_staleness is refused, version unchanged") {
  auto cfg = softmaxConfig();
  cfg.staleness.max_staleness = 1;
  Central c(cfg);
  REQUIRE(c.push(0, 0, 8, smallDelta(c.params, 1)).isOk());  // v1
  REQUIRE(c.push(1, 0, 8, smallDelta(c.params, 2)).isOk());  // tau 1 <= 1: v2
  auto before = c.fetch();
  REQUIRE(before.isOk());
  REQUIRE(before->header().getModelVersion() == 2);
  const auto model_before = c.model(*before);

  auto reply = c.push(0, /*base=*/0, 8, smallDelta(c.params, 3));  // tau 2 > 1
  auto mr = modelReplyOf(reply);  // a policy refusal is a ModelReply, not an ErrorReply
  CHECK_FALSE(mr.getApplied());
  CHECK(std::string(mr.getReason().cStr()).find("staleness") != std::string::npos);
  CHECK(mr.getStaleness() == 2);
  CHECK(mr.getWeight() == 0.0f);
  CHECK(reply->header().getModelVersion() == 2);
  // The refusal carries the current model so the group can resynchronise.
  CHECK(bitIdentical(c.model(*reply), model_before));
  auto after = c.fetch();
  REQUIRE(after.isOk());
  CHECK(after->header().getModelVersion() == 2);
}

TEST_CASE("central server: a delta with a NaN or an infinity is refused, model bit-identical") {
  Central c(softmaxConfig());
  REQUIRE(c.push(0, 0, 8, smallDelta(c.params, 1)).isOk());
  auto before = c.fetch();
  REQUIRE(before.isOk());
  const auto model_before = c.model(*before);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    CAPTURE(bad);
    auto delta = smallDelta(c.params, 2);
    delta[c.params / 2] = bad;
    auto reply = c.push(0, 1, 8, delta);
    auto mr = modelReplyOf(reply);
    CHECK_FALSE(mr.getApplied());
    CHECK(std::string(mr.getReason().cStr()).find("non-finite") != std::string::npos);
    CHECK(reply->header().getModelVersion() == 1);
    CHECK(bitIdentical(c.model(*reply), model_before));
  }
  auto after = c.fetch();
  REQUIRE(after.isOk());
  CHECK(after->header().getModelVersion() == 1);
  CHECK(bitIdentical(c.model(*after), model_before));
}

TEST_CASE("central server: a delta over max_delta_norm is refused") {
  auto cfg = softmaxConfig();
  cfg.max_delta_norm = 1.0;
  Central c(cfg);
  std::vector<float> delta(c.params, 0.0f);
  delta[0] = 3.0f;
  delta[1] = 4.0f;  // norm 5
  auto reply = c.push(0, 0, 8, delta);
  REQUIRE(reply.isOk());
  CHECK_FALSE(reply->header().getBody().getModelReply().getApplied());
  CHECK(reply->header().getModelVersion() == 0);
}

TEST_CASE("central server: a delta of the wrong length is an error; the server keeps serving") {
  Central c(softmaxConfig());
  for (std::size_t n : {c.params - 1, c.params + 1, std::size_t{1}}) {
    CAPTURE(n);
    auto reply = c.push(0, 0, 8, std::vector<float>(n, 0.0f));
    REQUIRE_FALSE(reply.isOk());
    CHECK(reply.status().code() == Code::kInvalidArgument);
  }
  auto f = c.fetch();
  REQUIRE(f.isOk());
  CHECK(f->header().getModelVersion() == 0);
  CHECK(bitIdentical(c.model(*f), initialModel(c.cfg)));
}

TEST_CASE("central server: a delta without a tensor is an error") {
  Central c(softmaxConfig());
  OutMessage out(c.cfg.limits.job_id, 0);
  auto body = out.header().getBody().initDeltaPush();
  body.setGroupId(0);
  auto reply = c.client->call(std::move(out), kTimeout);
  CHECK(reply.status().code() == Code::kInvalidArgument);
}

TEST_CASE("central server: a header with the wrong job id gets an error, no update") {
  Central c(softmaxConfig());
  OutMessage out(c.cfg.limits.job_id + 1, 0);
  out.header().getBody().initFetch();
  auto reply = c.client->call(std::move(out), kTimeout);
  REQUIRE_FALSE(reply.isOk());
  CHECK(reply.status().code() == Code::kPermissionDenied);

  OutMessage push(c.cfg.limits.job_id + 1, 0);
  push.header().getBody().initDeltaPush().setGroupId(0);
  push.addTensor(std::make_shared<const std::vector<float>>(c.params, 0.5f));
  auto r2 = c.client->call(std::move(push), kTimeout);
  CHECK(r2.status().code() == Code::kPermissionDenied);

  auto f = c.fetch();
  REQUIRE(f.isOk());
  CHECK(f->header().getModelVersion() == 0);
}

TEST_CASE("central server: a sender pushing for another group is refused") {
  Central c(softmaxConfig());
  OutMessage out(c.cfg.limits.job_id, /*sender=*/1);
  out.header().getBody().initDeltaPush().setGroupId(2);
  out.addTensor(std::make_shared<const std::vector<float>>(c.params, 0.0f));
  auto reply = c.client->call(std::move(out), kTimeout);
  CHECK(reply.status().code() == Code::kPermissionDenied);
}

TEST_CASE("central server: a delta based on a future version is an error") {
  Central c(softmaxConfig());
  auto reply = c.push(0, /*base=*/5, 8, std::vector<float>(c.params, 0.0f));
  CHECK(reply.status().code() == Code::kInvalidArgument);
  auto f = c.fetch();
  REQUIRE(f.isOk());
  CHECK(f->header().getModelVersion() == 0);
}

TEST_CASE("central server: a request kind it does not serve gets an error") {
  Central c(softmaxConfig());
  OutMessage out(c.cfg.limits.job_id, 0);
  out.header().getBody().initPull();
  auto reply = c.client->call(std::move(out), kTimeout);
  CHECK(reply.status().code() == Code::kInvalidArgument);
}

TEST_CASE("central server: CentralStatsQuery counts updates, samples and bad messages") {
  auto cfg = softmaxConfig();
  cfg.staleness.max_staleness = 0;  // any tau > 0 is refused
  Central c(cfg);

  auto empty = c.stats();
  REQUIRE(empty.isOk());
  REQUIRE(empty->kind() == BodyKind::CENTRAL_STATS);
  CHECK(empty->header().getBody().getCentralStats().getUpdatesApplied() == 0);

  REQUIRE(c.push(0, 0, 10, smallDelta(c.params, 1))
              ->header()
              .getBody()
              .getModelReply()
              .getApplied());  // applied, v1
  REQUIRE(c.push(1, 1, 20, smallDelta(c.params, 2))
              ->header()
              .getBody()
              .getModelReply()
              .getApplied());  // applied, v2
  auto nan_delta = smallDelta(c.params, 3);
  nan_delta[0] = std::numeric_limits<float>::quiet_NaN();
  REQUIRE_FALSE(
      c.push(0, 2, 5, nan_delta)->header().getBody().getModelReply().getApplied());  // refused, bad
  REQUIRE_FALSE(c.push(1, 1, 7, smallDelta(c.params, 4))
                    ->header()
                    .getBody()
                    .getModelReply()
                    .getApplied());                                    // tau 1: refused
  REQUIRE_FALSE(c.push(0, 2, 3, std::vector<float>(4, 0.0f)).isOk());  // wrong size: bad
  OutMessage wrong_job(cfg.limits.job_id + 1, 0);
  wrong_job.header().getBody().initFetch();
  REQUIRE_FALSE(c.client->call(std::move(wrong_job), kTimeout).isOk());  // wrong job: bad

  auto reply = c.stats();
  REQUIRE(reply.isOk());
  REQUIRE(reply->kind() == BodyKind::CENTRAL_STATS);
  auto st = reply->header().getBody().getCentralStats();
  CHECK(st.getVersion() == 2);
  CHECK(reply->header().getModelVersion() == 2);
  CHECK(st.getUpdatesApplied() == 2);
  CHECK(st.getUpdatesRefused() == 2);
  CHECK(st.getSamplesApplied() == 30);
  CHECK(st.getSamplesRefused() == 12);
  CHECK(st.getBadMessages() == 3);  // the NaN delta, the wrong size, the wrong job
  CHECK(st.getMaxStaleness() == 0);
  CHECK(st.getMeanStaleness() == 0.0f);
}

TEST_CASE("central server: stats report the largest and the mean staleness of merged deltas") {
  Central c(softmaxConfig());
  REQUIRE(c.push(0, 0, 1, smallDelta(c.params, 1)).isOk());  // tau 0
  REQUIRE(c.push(1, 0, 1, smallDelta(c.params, 2)).isOk());  // tau 1
  REQUIRE(c.push(2, 0, 1, smallDelta(c.params, 3)).isOk());  // tau 2
  auto reply = c.stats();
  REQUIRE(reply.isOk());
  auto st = reply->header().getBody().getCentralStats();
  CHECK(st.getMaxStaleness() == 2);
  CHECK(st.getMeanStaleness() == doctest::Approx(1.0f));
}

TEST_CASE("central server: the final checkpoint carries the outer adam state into a restart") {
  groupsgd::testing::TempDir dir;
  CentralConfig cfg;
  cfg.param_count = 500;
  cfg.outer = {kernels::OptimizerKind::kAdam, 0.1f, 0.0f, 0.0f};
  cfg.checkpoint_dir = dir.path();
  {
    Central c(cfg);
    CHECK_FALSE((*c.server)->outerStateRestored());  // nothing to resume
    REQUIRE(c.push(0, 0, 8, smallDelta(500, 1)).isOk());
    REQUIRE(c.push(1, 1, 8, smallDelta(500, 2)).isOk());
  }  // stops: the final checkpoint (version 2) is written with the state
  auto saved = loadNewestCheckpoint(dir.path(), 500);
  REQUIRE(saved.isOk());
  CHECK(saved->format == 2);
  CHECK(saved->optimizer.steps == 2);
  {
    Central again(cfg);
    CHECK((*again.server)->outerStateRestored());
    const auto state = (*again.server)->outerOptimizerState();
    CHECK(state.steps == 2);
    CHECK(bitIdentical(state.values, saved->optimizer.values));
  }
  // Resumed with another outer optimizer: the saved state does not fit and starts at zero.
  cfg.outer = {kernels::OptimizerKind::kMomentum, 0.5f, 0.9f, 0.0f};
  Central other(cfg);
  CHECK_FALSE((*other.server)->outerStateRestored());
  CHECK((*other.server)->outerOptimizerState().steps == 0);
}
