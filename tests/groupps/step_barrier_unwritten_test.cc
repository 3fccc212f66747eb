// The sum buffer is never cleared whole between steps: parts landing where nothing was
// written are stored, the rest is added, and what nobody covered is zeroed at the close.
// Every case starts from a buffer that holds an older step's values.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "groupsgd/groupps/step_barrier.h"
#include "groupsgd/groupps/unwritten_ranges.h"

using namespace groupsgd;
using namespace groupsgd::groupps;

namespace {

std::vector<MemberInfo> members(std::initializer_list<std::uint64_t> ids) {
  std::vector<MemberInfo> out;
  for (auto id : ids) out.push_back({id, 1, 1});
  return out;
}

// One step of member 9 adding 1000 everywhere, closed: the buffer now holds 1000s.
void dirty(StepBarrier& b, std::size_t n) {
  b.configure(members({9, 1, 2}));
  REQUIRE(b.add(9, 1, 0.0f, std::vector<float>(n, 1000.0f)).isOk());
  std::span<float> sum;
  float scale = 0;
  b.closeUnscaled(&sum, &scale);
  REQUIRE(sum[0] == 1000.0f);
}

std::vector<float> closedSum(StepBarrier& b) {
  std::span<float> sum;
  float scale = 0;
  b.closeUnscaled(&sum, &scale);
  return {sum.begin(), sum.end()};
}

}  // namespace

TEST_CASE("unwritten ranges: a range inside one unwritten range is taken whole") {
  UnwrittenRanges r;
  r.reset(10);
  std::vector<std::pair<std::size_t, std::size_t>> zeroed;
  auto zero = [&](std::size_t lo, std::size_t hi) { zeroed.emplace_back(lo, hi); };
  CHECK(r.take(2, 5, zero));        // [0,2) and [5,10) stay unwritten
  CHECK_FALSE(r.take(4, 7, zero));  // overlaps the written [2,5): adds
  CHECK(zeroed == std::vector<std::pair<std::size_t, std::size_t>>{{5, 7}});
  CHECK(r.take(7, 10, zero));
  CHECK_FALSE(r.take(2, 5, zero));  // all written already: nothing to zero
  CHECK(zeroed.size() == 1);
  zeroed.clear();
  r.takeAll(zero);
  CHECK(zeroed == std::vector<std::pair<std::size_t, std::size_t>>{{0, 2}});
  r.takeAll(zero);
  CHECK(zeroed.size() == 1);  // nothing left
}

TEST_CASE("unwritten ranges: a range over several unwritten pieces zeroes each") {
  UnwrittenRanges r;
  r.reset(12);
  auto none = [](std::size_t, std::size_t) { FAIL("nothing to zero"); };
  REQUIRE(r.take(3, 4, none));
  REQUIRE(r.take(7, 8, none));
  std::vector<std::pair<std::size_t, std::size_t>> zeroed;
  CHECK_FALSE(r.take(1, 10, [&](std::size_t lo, std::size_t hi) { zeroed.emplace_back(lo, hi); }));
  CHECK(zeroed == std::vector<std::pair<std::size_t, std::size_t>>{{1, 3}, {4, 7}, {8, 10}});
  zeroed.clear();
  r.takeAll([&](std::size_t lo, std::size_t hi) { zeroed.emplace_back(lo, hi); });
  CHECK(zeroed == std::vector<std::pair<std::size_t, std::size_t>>{{0, 1}, {10, 12}});
}

TEST_CASE("step barrier unwritten: overlapping parts and an uncovered range sum right") {
  StepBarrier b(8);
  dirty(b, 8);
  // Member 1: [2,6) of ones; member 2: [4,8) of twos; [0,2) covered by nobody.
  b.addPart(1, std::vector<float>(4, 1.0f), 2);
  b.addPart(1, std::vector<float>(4, 2.0f), 4);
  REQUIRE(b.commit(1, 1, 0.0f).isOk());
  CHECK(closedSum(b) == std::vector<float>{0, 0, 1, 1, 3, 3, 2, 2});
}

TEST_CASE("step barrier unwritten: the second step's sum holds only its own gradients") {
  StepBarrier b(4);
  dirty(b, 4);
  b.configure(members({1, 2}));
  REQUIRE(b.add(1, 2, 0.0f, std::vector<float>{1, 2, 3, 4}).isOk());
  REQUIRE(b.add(2, 1, 0.0f, std::vector<float>{1, 1, 1, 1}).isOk());
  CHECK(closedSum(b) == std::vector<float>{3, 5, 7, 9});
  b.clearAfterClose();
  REQUIRE(b.add(2, 1, 0.0f, std::vector<float>{5, 5, 5, 5}).isOk());
  CHECK(closedSum(b) == std::vector<float>{5, 5, 5, 5});
}

TEST_CASE("step barrier unwritten: a part refused half way leaves zeros, not older values") {
  // Two blocks of the check's size: the second holds a NaN, so only the first is stored.
  const std::size_t block = std::size_t{1} << 16;
  StepBarrier b(2 * block);
  dirty(b, 2 * block);
  std::vector<float> bad(2 * block, 1.0f);
  bad[block + 3] = std::numeric_limits<float>::quiet_NaN();
  const kernels::FiniteAdd r = b.addPartIfFinite(1, bad, 0);
  REQUIRE(r.added == block);
  b.removePart(1, std::span<const float>(bad).first(r.added), 0);  // as the group PS does
  REQUIRE(b.add(2, 1, 0.0f, std::vector<float>(2 * block, 0.5f)).isOk());
  const std::vector<float> sum = closedSum(b);
  CHECK(sum[0] == 0.5f);
  CHECK(sum[block - 1] == 0.5f);
  CHECK(sum[block + 3] == 0.5f);  // not NaN, not 1000.5
  CHECK(sum.back() == 0.5f);
}

TEST_CASE("step barrier unwritten: a step of skips after a full step sums to zero") {
  StepBarrier b(5);
  dirty(b, 5);
  b.configure(members({1}));
  REQUIRE(b.skip(1).isOk());
  CHECK(closedSum(b) == std::vector<float>(5, 0.0f));
}

TEST_CASE(
    "step barrier unwritten: stored and added parts give the added-into-zero sum bit for bit") {
  const std::size_t n = 1000;
  std::vector<float> g1(n), g2(n);
  for (std::size_t i = 0; i < n; ++i) {
    g1[i] = std::sin(static_cast<float>(i)) * 1e-3f;
    g2[i] = std::cos(static_cast<float>(i) * 0.7f) * 3.0f;
  }
  std::vector<float> expect(n, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    expect[i] += 3.0f * g1[i];
    expect[i] += 5.0f * g2[i];
  }
  StepBarrier b(n);
  dirty(b, n);
  (void)b.addPartIfFinite(3, std::span<const float>(g1).first(600), 0);
  (void)b.addPartIfFinite(3, std::span<const float>(g1).subspan(600), 600);
  REQUIRE(b.commit(1, 3, 0.0f).isOk());
  REQUIRE(b.add(2, 5, 0.0f, g2).isOk());
  CHECK(closedSum(b) == expect);
}
