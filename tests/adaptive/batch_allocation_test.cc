#include "groupsgd/adaptive/policy/batch_allocation.h"

#include <doctest/doctest.h>

#include <numeric>
#include <random>

using namespace groupsgd::adaptive::policy;

namespace {
WorkerSpeed w(std::uint64_t id, double v, double a = 0) { return {id, a, v}; }
std::uint32_t sum(const std::vector<std::uint32_t>& b) {
  return std::accumulate(b.begin(), b.end(), 0u);
}
}  // namespace

TEST_CASE("batches: proportional to speed without overhead, exact total, members finish together") {
  std::vector<WorkerSpeed> m = {w(1, 4), w(2, 4), w(3, 4), w(4, 1)};  // one 4x slower
  auto b = allocateBatches(m, 128, {4, 1024});
  CHECK(sum(b) == 128);
  CHECK(b[0] == doctest::Approx(128 * 4 / 13.0).epsilon(0.05));
  CHECK(b[3] == doctest::Approx(128 * 1 / 13.0).epsilon(0.15));
  const double t = groupStepMs(m, b);
  const double ideal = 128.0 / 13.0;  // all members busy the whole step
  CHECK(t <= ideal * 1.12);
}

TEST_CASE("batches: fixed overhead is accounted for (b_i = v_i (T - a_i))") {
  // Equal throughput, but worker 2 loses 8 ms per step to its link: it gets less work.
  std::vector<WorkerSpeed> m = {w(1, 2, 0), w(2, 2, 8)};
  auto b = allocateBatches(m, 64, {1, 1024});
  CHECK(sum(b) == 64);
  CHECK(b[0] > b[1]);
  CHECK(m[0].stepMs(b[0]) == doctest::Approx(m[1].stepMs(b[1])).epsilon(0.05));
}

TEST_CASE("batches: clamped to bounds; a hopeless straggler gets the minimum") {
  std::vector<WorkerSpeed> m = {w(1, 4), w(2, 4), w(3, 0.01)};
  auto b = allocateBatches(m, 96, {8, 64});
  CHECK(sum(b) == 96);
  CHECK(b[2] == 8);
  for (auto x : b) {
    CHECK(x >= 8);
    CHECK(x <= 64);
  }
}

TEST_CASE("batches: roundToSum keeps the exact total within bounds") {
  std::vector<double> v = {10.4, 10.4, 10.2};
  auto b = roundToSum(v, 31, {1, 100});
  CHECK(sum(b) == 31);
}

TEST_CASE(
    "batches: the damped controller moves halfway, at most 25%, and converges without "
    "oscillating") {
  std::vector<std::uint32_t> cur = {32, 32, 32, 32};
  const std::vector<std::uint32_t> target = {40, 40, 40, 8};
  DampingConfig cfg;
  auto next = dampedUpdate(cur, target, {4, 1024}, cfg);
  CHECK(sum(next) == 128);
  CHECK(next[3] >= 24 - 1);  // -25% at most in one update
  CHECK(next[3] < 32);
  int direction_changes = 0;
  int prev_sign = 0;
  for (int i = 0; i < 30; ++i) {
    auto n2 = dampedUpdate(next, target, {4, 1024}, cfg);
    CHECK(sum(n2) == 128);
    const int sign = n2[3] < next[3] ? -1 : (n2[3] > next[3] ? 1 : 0);
    if (sign != 0 && prev_sign != 0 && sign != prev_sign) ++direction_changes;
    if (sign != 0) prev_sign = sign;
    next = n2;
  }
  CHECK(direction_changes == 0);
  CHECK(next[3] <= 12);  // within the dead band of the target
}

TEST_CASE("batches: a target within the dead band changes nothing") {
  std::vector<std::uint32_t> cur = {32, 32};
  std::vector<std::uint32_t> target = {34, 30};
  CHECK(dampedUpdate(cur, target, {4, 1024}, {}) == cur);
}
