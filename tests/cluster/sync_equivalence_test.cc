// Sync mode (one group, K = 1) must compute the same parameters as single-process SGD
// over the union of the members' batches, up to float reassociation.
#include <cmath>
#include <latch>
#include <random>
#include <thread>

#include "cluster_fixture.h"
#include "groupsgd/kernels/model.h"
#include "groupsgd/kernels/optimizer.h"

using namespace groupsgd;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kDim = 784;
constexpr int kSteps = 6;
const std::uint32_t kBatches[] = {8, 16, 24};  // unequal: the mean must weight by batch

struct Batch {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

Batch makeBatch(std::uint32_t worker, int step, std::uint32_t n) {
  std::mt19937 rng(worker * 1000 + step);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  Batch b;
  b.x.resize(n * kDim);
  b.y.resize(n);
  for (auto& v : b.x) v = pixel(rng);
  for (auto& l : b.y) l = static_cast<std::int32_t>(rng() % 10);
  return b;
}

// The group (inner) optimizer and the ranges it does not decay.
struct Inner {
  kernels::OptimizerConfig cfg{kernels::OptimizerKind::kMomentum, 0.05f, 0.9f, 0.0f};
  std::vector<kernels::ElementRange> no_decay;
  // |group - reference|: the two sum the gradient in different orders, and adam divides
  // by sqrt(v), so an element whose gradient is near zero magnifies that rounding.
  double tolerance = 1e-5;
};

// Three members on threads, each with its own model instance (models keep scratch), train
// kSteps steps in the group; their final replicas.
std::vector<std::vector<float>> trainInGroup(testing::MiniCluster& cluster,
                                             std::uint32_t part_bytes) {
  std::vector<std::vector<float>> finals(3);
  std::vector<std::thread> threads;
  // A member counts in a step once it has pulled: all pull before anyone pushes, so
  // every step has all three (as after the start-up of a real run).
  std::latch joined(3);
  for (std::uint32_t w = 0; w < 3; ++w) {
    threads.emplace_back([&, w] {
      auto model = kernels::makeModel(kernels::ModelKind::kMlp);
      client::GroupClient client(cluster.ctx, cluster.assignment(w + 1, 1), 1, 10000ms);
      client.setPartBytes(part_bytes);
      std::vector<float> params(cluster.params), grad(cluster.params);
      auto pulled = testbed::pullWhenReady(client, params);
      REQUIRE(pulled.isOk());
      std::uint64_t step = pulled->step;
      joined.arrive_and_wait();
      for (int s = 0; s < kSteps; ++s) {
        Batch b = makeBatch(w, s, kBatches[w]);
        float loss = model->lossAndGrad(params, b.x.data(), b.y.data(), kBatches[w], grad);
        auto ans = client.push(step, grad, kBatches[w], loss, 1.0f, params);
        REQUIRE(ans.isOk());
        REQUIRE(ans->accepted);
        step = ans->step;
      }
      finals[w] = params;
    });
  }
  for (auto& t : threads) t.join();
  return finals;
}

// The reference: one process, one optimizer, the concatenated batch.
std::vector<float> trainReference(const Inner& inner) {
  auto model = kernels::makeModel(kernels::ModelKind::kMlp);
  std::vector<float> ref(model->paramCount()), grad(model->paramCount());
  model->init(ref, 42);
  kernels::Optimizer opt(inner.cfg, ref.size(), inner.no_decay);
  for (int s = 0; s < kSteps; ++s) {
    Batch all;
    for (std::uint32_t w = 0; w < 3; ++w) {
      Batch b = makeBatch(w, s, kBatches[w]);
      all.x.insert(all.x.end(), b.x.begin(), b.x.end());
      all.y.insert(all.y.end(), b.y.begin(), b.y.end());
    }
    model->lossAndGrad(ref, all.x.data(), all.y.data(), all.y.size(), grad);
    opt.step(ref, grad);
  }
  return ref;
}

double maxAbsDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double most = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    most = std::max(most, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return most;
}

// After a flush the central model holds the reference's parameters.
void checkCentralAfterFlush(testing::MiniCluster& cluster, const std::vector<float>& ref,
                            double tolerance) {
  auto stats = cluster.flush();
  auto gs = stats.header().getBody().getGroupStats();
  CHECK(gs.getSamplesReceived() == kSteps * (8 + 16 + 24));
  CHECK(gs.getSamplesPending() == 0);
  CHECK(gs.getSamplesInFlight() == 0);
  RpcClient central(cluster.ctx, (*cluster.central)->endpoint(), MessageLimits{});
  std::vector<float> central_params(ref.size());
  auto version = client::fetchCentralModel(central, 1, central_params, 3000ms);
  REQUIRE(version.isOk());
  // Exchanges never block the members: a step that closes while a delta is in flight
  // rides in the next delta, so there are at most kSteps central versions.
  CHECK(*version >= 1);
  CHECK(*version <= kSteps);
  CHECK(maxAbsDifference(central_params, ref) < tolerance);
}

// part_bytes: the size of the parts gradients, replicas, deltas and models travel in
// (the MLP's 940,584 bytes are one message at the default).
void checkSyncEquivalence(std::uint32_t part_bytes, const Inner& inner = {}) {
  centralps::CentralConfig ccfg;
  ccfg.model = kernels::ModelKind::kMlp;
  ccfg.seed = 42;
  ccfg.part_bytes = part_bytes;
  groupps::GroupServerConfig gcfg;
  gcfg.optimizer = inner.cfg;
  gcfg.no_decay = inner.no_decay;
  gcfg.exchange_period = 1;
  gcfg.part_bytes = part_bytes;
  testing::MiniCluster cluster(ccfg, gcfg);
  cluster.configure({{1, kBatches[0]}, {2, kBatches[1]}, {3, kBatches[2]}}, 1);

  const std::vector<std::vector<float>> finals = trainInGroup(cluster, part_bytes);
  const std::vector<float> ref = trainReference(inner);
  REQUIRE(finals[0].size() == ref.size());
  CHECK(finals[0] == finals[1]);  // every member gets the same replica, bit for bit
  CHECK(finals[0] == finals[2]);
  std::vector<float> init(ref.size());
  kernels::makeModel(kernels::ModelKind::kMlp)->init(init, 42);
  const double max_err = maxAbsDifference(finals[0], ref);
  const double max_move = maxAbsDifference(ref, init);
  MESSAGE("max |group - reference| = " << max_err << ", max parameter movement " << max_move);
  CHECK(max_move > 1e-3);  // training actually moved the parameters
  CHECK(max_err < inner.tolerance);
  checkCentralAfterFlush(cluster, ref, inner.tolerance);
}

}  // namespace

TEST_CASE("sync mode: one group with K=1 equals single-process SGD on the union batch") {
  checkSyncEquivalence(kDefaultPartBytes);
}

TEST_CASE("sync mode in parts: gradients, replicas, deltas and models in 64 KiB parts") {
  checkSyncEquivalence(64u << 10);  // the MLP in 15 parts each way
}

TEST_CASE("sync mode in parts with adamw, biases not decayed: equals the reference") {
  // 64 KiB parts: the no-decay ranges (the MLP's biases) are clipped to each part. A
  // strong decay (lr*wd = 0.1 per step) makes a bias decayed by mistake stand out.
  Inner adamw;
  adamw.cfg = {kernels::OptimizerKind::kAdamW, 1e-2f, 0.0f, 10.0f};
  adamw.no_decay = kernels::oneDimParamRanges(kernels::ModelKind::kMlp);
  adamw.tolerance = 1e-4;
  checkSyncEquivalence(64u << 10, adamw);
  // The check can fail: decaying the biases too moves them by far more than its 1e-4.
  Inner all_decayed = adamw;
  all_decayed.no_decay.clear();
  const auto exempt = trainReference(adamw), decayed = trainReference(all_decayed);
  const kernels::ElementRange b3 = adamw.no_decay.back();
  double most = 0;
  for (std::size_t i = b3.begin; i < b3.end; ++i)
    most = std::max(most, static_cast<double>(std::fabs(exempt[i] - decayed[i])));
  MESSAGE("the last bias with and without decay differs by up to " << most);
  CHECK(most > 1e-3);
}
