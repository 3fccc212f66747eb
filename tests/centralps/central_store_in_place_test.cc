// CentralStore::applyDelta from a delta seen in place (TensorView), piece by piece:
// bit-identical to the contiguous path for every outer optimizer and shard layout.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "centralps_test_util.h"
#include "groupsgd/centralps/central_store.h"
#include "groupsgd/kernels/ops.h"

using namespace groupsgd;
using namespace groupsgd::centralps;
using centralps::testing::randomVector;
using kernels::OptimizerConfig;
using kernels::OptimizerKind;

namespace {

TensorView chunksOf(const std::vector<float>& d, std::size_t chunk) {
  TensorView v;
  for (std::size_t off = 0; off < d.size(); off += chunk) {
    v.parts.emplace_back(d.data() + off, std::min(chunk, d.size() - off));
  }
  v.size = d.size();
  return v;
}

}  // namespace

TEST_CASE("central store in place: chunked deltas give what one whole-model optimizer gives") {
  // The reference is the old algorithm: one optimizer over the whole model stepping along
  // g = -weight * delta. Bit for bit: the optimizers are element-wise, so pieces, shards
  // and chunks must not change a single result. More than one piece per shard, odd chunks.
  const std::size_t n = Shard::kPieceElements * 2 + 12345;
  for (auto kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kNesterov}) {
    for (std::size_t shards : {1u, 3u}) {
      CAPTURE(static_cast<int>(kind));
      CAPTURE(shards);
      std::mt19937 rng(11);
      auto reference = randomVector(n, rng);
      const OptimizerConfig outer{kind, 0.7f, 0.9f, 0.01f};
      CentralStore chunked(reference, outer, shards);
      kernels::Optimizer whole(outer, n);
      std::vector<float> g(n);
      for (int step = 0; step < 3; ++step) {
        const auto delta = randomVector(n, rng);
        for (std::size_t i = 0; i < n; ++i) g[i] = delta[i];
        kernels::scale(g, -0.5f);
        whole.step(reference, g);
        REQUIRE(chunked.applyDelta(chunksOf(delta, 1000003), 0.5f).isOk());
      }
      const auto got = *chunked.snapshot();
      REQUIRE(got.size() == reference.size());
      CHECK(std::memcmp(got.data(), reference.data(), n * sizeof(float)) == 0);
      CHECK(chunked.version() == 3);
    }
  }
}

TEST_CASE("central store in place: a view of the wrong size is an error, version unchanged") {
  CentralStore store(std::vector<float>(10, 1.0f), {OptimizerKind::kSgd, 1.0f, 0.0f, 0.0f});
  std::vector<float> d(9, 1.0f);
  CHECK_FALSE(store.applyDelta(chunksOf(d, 4), 1.0f).isOk());
  CHECK(store.version() == 0);
}
