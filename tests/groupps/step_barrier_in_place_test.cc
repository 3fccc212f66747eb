// The barrier fed from gradients seen in place (TensorView) and closed in place: the same
// sums as the copying API, and no stale values carried from one step into the next.
#include <doctest/doctest.h>

#include <vector>

#include "groupsgd/groupps/step_barrier.h"

using namespace groupsgd;
using namespace groupsgd::groupps;

namespace {

std::vector<MemberInfo> members(std::initializer_list<std::uint64_t> ids) {
  std::vector<MemberInfo> out;
  for (auto id : ids) out.push_back({id, 8, 1});
  return out;
}

// g split into parts of the given sizes, as a message's chunks would be.
TensorView partsOf(const std::vector<float>& g, std::initializer_list<std::size_t> sizes) {
  TensorView v;
  std::size_t off = 0;
  for (std::size_t n : sizes) {
    v.parts.emplace_back(g.data() + off, n);
    off += n;
  }
  v.size = off;
  return v;
}

}  // namespace

TEST_CASE("step barrier in place: a gradient in parts gives the same mean as in one piece") {
  const std::vector<float> g1{1, 2, 3, 4, 5}, g2{-5, 4, -3, 2, -1};
  StepBarrier whole(5), split(5);
  whole.configure(members({1, 2}));
  split.configure(members({1, 2}));
  REQUIRE(whole.add(1, 3, 0.0f, g1).isOk());
  REQUIRE(whole.add(2, 5, 0.0f, g2).isOk());
  REQUIRE(split.add(1, 3, 0.0f, partsOf(g1, {2, 3})).isOk());
  REQUIRE(split.add(2, 5, 0.0f, partsOf(g2, {1, 1, 3})).isOk());
  std::vector<float> expect(5);
  whole.close(expect);
  std::span<const float> mean;
  auto closed = split.closeInPlace(&mean);
  CHECK(closed.samples == 8);
  CHECK(std::vector<float>(mean.begin(), mean.end()) == expect);
  CHECK(expect[0] == doctest::Approx((3 * 1 - 5 * 5) / 8.0));
}

TEST_CASE("step barrier in place: the next step starts from zero, not from the last mean") {
  StepBarrier b(3);
  b.configure(members({1}));
  const std::vector<float> first{8, 8, 8}, second{1, 2, 3};
  REQUIRE(b.add(1, 2, 0.0f, first).isOk());
  std::span<const float> mean;
  b.closeInPlace(&mean);
  CHECK(std::vector<float>(mean.begin(), mean.end()) == first);
  REQUIRE(b.add(1, 4, 0.0f, partsOf(second, {3})).isOk());
  b.closeInPlace(&mean);
  CHECK(std::vector<float>(mean.begin(), mean.end()) == second);
}

TEST_CASE("step barrier in place: a view of the wrong size is refused and changes nothing") {
  StepBarrier b(3);
  b.configure(members({1}));
  const std::vector<float> g{1, 2};
  CHECK(b.add(1, 1, 0.0f, partsOf(g, {2})).code() == Code::kInvalidArgument);
  CHECK(b.arrivals() == 0);
}

TEST_CASE("step barrier in place: closing a step nobody reported to gives a zero mean") {
  StepBarrier b(2);
  b.configure(members({1}));
  REQUIRE(b.add(1, 1, 0.0f, std::vector<float>{3, 4}).isOk());
  std::span<const float> mean;
  b.closeInPlace(&mean);
  b.closeInPlace(&mean);  // no arrivals: the old mean must not come back
  CHECK(std::vector<float>(mean.begin(), mean.end()) == std::vector<float>{0, 0});
}
