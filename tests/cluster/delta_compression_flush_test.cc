// Compressed group -> central deltas and the forced exchange of a flush: whatever the delta
// encoding, a flush hands every sample's progress to the central PS exactly once (top-k and
// sign residuals included) and the group answers it. The fp16 case once crashed the group
// PS: the flush added fp16's residual, which is empty, over the whole model.
#include <algorithm>
#include <cmath>
#include <string>

#include "cluster_fixture.h"
#include "groupsgd/codec/compression_spec.h"

using namespace groupsgd;
using namespace std::chrono_literals;

namespace {

constexpr float kLr = 0.5f;
constexpr std::uint32_t kBatch = 4;

groupps::GroupServerConfig groupWith(const std::string& delta_compression) {
  groupps::GroupServerConfig g;
  g.optimizer = {kernels::OptimizerKind::kSgd, kLr, 0.0f, 0.0f};
  auto spec = parseCompressionSpec(delta_compression);
  REQUIRE(spec.isOk());
  g.delta_compression = *spec;
  return g;
}

// The same gradient every step: with plain SGD the progress after n steps is -n·lr·g
// whatever the replica was rebased onto in between.
std::vector<float> fixedGradient(std::size_t n) {
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = 0.001f * static_cast<float>(i % 7) - 0.002f;
  return g;
}

// One member pushes `steps` steps with exchange period k, then the group is flushed: the
// flush is answered with nothing left pending or in flight, and the central model is the
// start plus every step's update.
void checkFlushHandsEverythingOver(const std::string& delta_compression, std::uint32_t k,
                                   int steps) {
  CAPTURE(delta_compression);
  CAPTURE(k);
  testing::MiniCluster cluster(testing::smallModel(), groupWith(delta_compression));
  cluster.configure({{1, kBatch}}, 1, k);
  client::GroupClient client(cluster.ctx, cluster.assignment(1, 1), 1, 5000ms);
  std::vector<float> params(cluster.params);
  auto pulled = testbed::pullWhenReady(client, params);
  REQUIRE(pulled.isOk());
  const std::vector<float> start = params;
  const std::vector<float> g = fixedGradient(cluster.params);
  std::uint64_t step = pulled->step;
  for (int s = 0; s < steps; ++s) {
    auto ans = client.push(step, g, kBatch, 0.0f, 0.0f, params);
    REQUIRE(ans.isOk());
    REQUIRE(ans->accepted);
    step = ans->step;
  }

  auto stats = cluster.flush();
  auto gs = stats.header().getBody().getGroupStats();
  CHECK(gs.getSamplesReceived() == static_cast<std::uint64_t>(steps) * kBatch);
  CHECK(gs.getSamplesPending() == 0);
  CHECK(gs.getSamplesInFlight() == 0);
  CHECK(gs.getSamplesDropped() == 0);

  RpcClient central(cluster.ctx, (*cluster.central)->endpoint(), MessageLimits{});
  std::vector<float> central_params(cluster.params);
  auto version = client::fetchCentralModel(central, 1, central_params, 3000ms);
  REQUIRE(version.isOk());
  CHECK(*version >= 1);
  double err = 0;
  for (std::size_t i = 0; i < central_params.size(); ++i) {
    const float want = start[i] - static_cast<float>(steps) * kLr * g[i];
    err = std::max(err, static_cast<double>(std::fabs(central_params[i] - want)));
  }
  CHECK(err < 1e-5);
}

}  // namespace

TEST_CASE("a flush with samples pending hands them over whatever the delta encoding") {
  // K far above the steps: nothing is exchanged until the flush forces it.
  for (const char* c : {"fp16", "topk:0.01", "sign", "dense"}) {
    checkFlushHandsEverythingOver(c, 1000, 3);
  }
}

TEST_CASE("compressed deltas every step, then a flush: the residual reaches the central PS") {
  // K = 1: compressed deltas leave each step (some while the last is in flight), the
  // error-feedback residual holds what they left out, the flush sends it dense.
  for (const char* c : {"topk:0.01", "sign"}) checkFlushHandsEverythingOver(c, 1, 5);
}
