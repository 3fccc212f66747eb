#include "groupsgd/centralps/central_store.h"

#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "centralps_test_util.h"

using namespace groupsgd;
using namespace groupsgd::centralps;
using namespace groupsgd::centralps::testing;  // bitIdentical, randomVector
using kernels::OptimizerConfig;
using kernels::OptimizerKind;

namespace {

OptimizerConfig plainSgd() { return {OptimizerKind::kSgd, 1.0f, 0.0f, 0.0f}; }

}  // namespace

TEST_CASE("central store: starts at version 0 holding the initial parameters") {
  CentralStore store({1.0f, 2.0f, 3.0f}, plainSgd());
  CHECK(store.paramCount() == 3);
  CHECK(store.version() == 0);
  CHECK(store.shardCount() == 1);
  CHECK(*store.snapshot() == std::vector<float>{1.0f, 2.0f, 3.0f});
}

TEST_CASE("central store: plain SGD with lr 1 applies theta + weight * delta exactly") {
  std::mt19937 rng(7);
  const auto theta = randomVector(257, rng);
  const auto delta = randomVector(257, rng, 0.1f);
  CentralStore store(theta, plainSgd());
  REQUIRE(store.applyDelta(delta, 1.0f).isOk());
  std::vector<float> expect(theta.size());
  for (std::size_t i = 0; i < theta.size(); ++i) expect[i] = theta[i] + delta[i];
  CHECK(bitIdentical(*store.snapshot(), expect));

  // A weighted delta (power-of-two weight: the products are exact).
  REQUIRE(store.applyDelta(delta, 0.25f).isOk());
  for (std::size_t i = 0; i < theta.size(); ++i) expect[i] = expect[i] + 0.25f * delta[i];
  CHECK(bitIdentical(*store.snapshot(), expect));
}

TEST_CASE("central store: every applied delta increments the version by one") {
  CentralStore store(std::vector<float>(4, 0.0f), plainSgd());
  const std::vector<float> delta(4, 1.0f);
  for (std::uint64_t v = 1; v <= 5; ++v) {
    REQUIRE(store.applyDelta(delta, 1.0f).isOk());
    CHECK(store.version() == v);
  }
  CHECK(*store.snapshot() == std::vector<float>(4, 5.0f));
}

TEST_CASE("central store: a weight of 0 changes nothing but still counts a version") {
  CentralStore store({1.0f, -1.0f}, plainSgd());
  REQUIRE(store.applyDelta(std::vector<float>{3.0f, 4.0f}, 0.0f).isOk());
  CHECK(store.version() == 1);
  CHECK(*store.snapshot() == std::vector<float>{1.0f, -1.0f});
}

TEST_CASE("central store: the momentum outer optimizer matches a hand computation over 2 steps") {
  // g = -w * delta;  v = mu v + g;  theta -= lr v. Values are dyadic so every step is exact.
  const OptimizerConfig outer{OptimizerKind::kMomentum, 0.5f, 0.5f, 0.0f};
  CentralStore store({1.0f, 2.0f, 3.0f}, outer);
  REQUIRE(store.applyDelta(std::vector<float>{1.0f, -2.0f, 0.5f}, 1.0f).isOk());
  // g1 = {-1, 2, -0.5} = v1; theta1 = theta0 - 0.5 v1.
  CHECK(*store.snapshot() == std::vector<float>{1.5f, 1.0f, 3.25f});
  REQUIRE(store.applyDelta(std::vector<float>{2.0f, 4.0f, -1.0f}, 0.5f).isOk());
  // g2 = {-1, -2, 0.5}; v2 = 0.5 v1 + g2 = {-1.5, -1, 0.25}; theta2 = theta1 - 0.5 v2.
  CHECK(*store.snapshot() == std::vector<float>{2.25f, 1.5f, 3.125f});
  CHECK(store.version() == 2);
}

TEST_CASE("central store: momentum in the outer optimizer differs from plain SGD on step 2") {
  // Guards against the velocity being dropped between applies.
  const OptimizerConfig momentum{OptimizerKind::kMomentum, 0.5f, 0.5f, 0.0f};
  const OptimizerConfig sgd{OptimizerKind::kSgd, 0.5f, 0.0f, 0.0f};
  CentralStore a({0.0f}, momentum), b({0.0f}, sgd);
  for (auto* s : {&a, &b}) {
    REQUIRE(s->applyDelta(std::vector<float>{1.0f}, 1.0f).isOk());
    REQUIRE(s->applyDelta(std::vector<float>{1.0f}, 1.0f).isOk());
  }
  CHECK((*b.snapshot())[0] == 1.0f);   // 0.5 + 0.5
  CHECK((*a.snapshot())[0] == 1.25f);  // 0.5 + 0.5 * (0.5 * 1 + 1)
}

TEST_CASE("central store: 3 shards give bit-identical results to 1 shard") {
  std::mt19937 rng(1234);
  const OptimizerConfig outer{OptimizerKind::kNesterov, 0.7f, 0.9f, 0.01f};
  for (std::size_t n : {std::size_t{1000}, std::size_t{1001}, std::size_t{7}}) {
    CAPTURE(n);
    REQUIRE(n % 3 != 0);
    const auto init = randomVector(n, rng);
    CentralStore one(init, outer, 1);
    CentralStore three(init, outer, 3);
    CHECK(one.shardCount() == 1);
    CHECK(three.shardCount() == 3);
    for (int step = 0; step < 6; ++step) {
      const auto delta = randomVector(n, rng, 0.5f);
      const float w = 1.0f / static_cast<float>(1 + step % 3);
      REQUIRE(one.applyDelta(delta, w).isOk());
      REQUIRE(three.applyDelta(delta, w).isOk());
    }
    CHECK(one.version() == three.version());
    CHECK(bitIdentical(*one.snapshot(), *three.snapshot()));
    CHECK_FALSE(bitIdentical(*one.snapshot(), init));
  }
}

TEST_CASE("central store: snapshotInto fills a reused buffer with what snapshot returns") {
  std::mt19937 rng(99);
  const auto init = randomVector(1001, rng);
  CentralStore store(init, {OptimizerKind::kSgd, 1.0f, 0.0f, 0.0f}, 3);
  std::vector<float> buf(1001, -7.0f);
  store.snapshotInto(buf);
  CHECK(bitIdentical(buf, init));
  REQUIRE(store.applyDelta(randomVector(1001, rng, 0.5f), 1.0f).isOk());
  store.snapshotInto(buf);  // the same buffer, overwritten on every shard's range
  CHECK(bitIdentical(buf, *store.snapshot()));
  CHECK_FALSE(bitIdentical(buf, init));
}

TEST_CASE("central store: more shards than parameters are clamped, still correct") {
  CentralStore store({1.0f, 2.0f}, plainSgd(), 3);
  CHECK(store.shardCount() <= 2);
  REQUIRE(store.applyDelta(std::vector<float>{0.5f, -0.5f}, 1.0f).isOk());
  CHECK(*store.snapshot() == std::vector<float>{1.5f, 1.5f});
}

TEST_CASE("central store: a snapshot is a copy that later applies do not change") {
  CentralStore store({1.0f, 2.0f, 3.0f, 4.0f}, plainSgd(), 2);
  Payload before = store.snapshot();
  REQUIRE(store.applyDelta(std::vector<float>(4, 1.0f), 1.0f).isOk());
  CHECK(*before == std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f});
  CHECK(*store.snapshot() == std::vector<float>{2.0f, 3.0f, 4.0f, 5.0f});
  CHECK(store.snapshot().get() != before.get());
}

TEST_CASE("central store: a delta of the wrong size is refused and changes nothing") {
  CentralStore store({1.0f, 2.0f, 3.0f}, plainSgd());
  Status s = store.applyDelta(std::vector<float>{1.0f, 1.0f}, 1.0f);
  CHECK_FALSE(s.isOk());
  CHECK(store.version() == 0);
  CHECK(*store.snapshot() == std::vector<float>{1.0f, 2.0f, 3.0f});
}

TEST_CASE("central store: restore sets parameters and version") {
  CentralStore store({0.0f, 0.0f, 0.0f}, plainSgd(), 3);
  REQUIRE(store.restore(std::vector<float>{7.0f, 8.0f, 9.0f}, 42).isOk());
  CHECK(store.version() == 42);
  CHECK(*store.snapshot() == std::vector<float>{7.0f, 8.0f, 9.0f});
  REQUIRE(store.applyDelta(std::vector<float>{1.0f, 1.0f, 1.0f}, 1.0f).isOk());
  CHECK(store.version() == 43);
  CHECK(*store.snapshot() == std::vector<float>{8.0f, 9.0f, 10.0f});
}

TEST_CASE("central store: restore resets the outer optimizer's velocity") {
  const OptimizerConfig outer{OptimizerKind::kMomentum, 1.0f, 0.5f, 0.0f};
  CentralStore store({0.0f}, outer);
  REQUIRE(store.applyDelta(std::vector<float>{1.0f}, 1.0f).isOk());  // v = -1
  REQUIRE(store.restore(std::vector<float>{0.0f}, 0).isOk());
  REQUIRE(store.applyDelta(std::vector<float>{1.0f}, 1.0f).isOk());  // fresh v = -1, not -1.5
  CHECK((*store.snapshot())[0] == 1.0f);
}

TEST_CASE("central store: restore with the wrong size is refused and changes nothing") {
  CentralStore store({1.0f, 2.0f, 3.0f}, plainSgd());
  REQUIRE(store.applyDelta(std::vector<float>{1.0f, 1.0f, 1.0f}, 1.0f).isOk());
  for (std::size_t n : {std::size_t{2}, std::size_t{4}, std::size_t{0}}) {
    Status s = store.restore(std::vector<float>(n, 5.0f), 9);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find("parameters") != std::string::npos);
  }
  CHECK(store.version() == 1);
  CHECK(*store.snapshot() == std::vector<float>{2.0f, 3.0f, 4.0f});
}
