#include "groupsgd/groupps/step_barrier.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

using namespace groupsgd;
using namespace groupsgd::groupps;

namespace {

std::vector<MemberInfo> members(std::initializer_list<std::uint64_t> ids, std::uint32_t batch = 8) {
  std::vector<MemberInfo> out;
  for (auto id : ids) out.push_back({id, batch, 1});
  return out;
}

std::vector<std::uint64_t> sorted(std::vector<std::uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("step barrier: the mean is batch-weighted, sum b_i g_i / sum b_i") {
  StepBarrier b(3);
  b.configure(members({1, 2}));
  REQUIRE(b.add(1, 1, 0.0f, std::vector<float>{4.0f, 0.0f, -8.0f}).isOk());
  REQUIRE(b.add(2, 3, 0.0f, std::vector<float>{0.0f, 4.0f, 8.0f}).isOk());
  REQUIRE(b.complete());
  std::vector<float> mean(3, -99.0f);
  auto closed = b.close(mean);
  // (1*4 + 3*0)/4, (1*0 + 3*4)/4, (1*-8 + 3*8)/4; an unweighted mean would give 2, 2, 0.
  CHECK(mean == std::vector<float>{1.0f, 3.0f, 4.0f});
  CHECK(closed.samples == 4);
  CHECK(sorted(closed.reported) == std::vector<std::uint64_t>{1, 2});
}

TEST_CASE("step barrier: close reports samples and the batch-weighted mean loss") {
  StepBarrier b(1);
  b.configure(members({1, 2}));
  REQUIRE(b.add(1, 1, 2.0f, std::vector<float>{0.0f}).isOk());
  REQUIRE(b.add(2, 3, 6.0f, std::vector<float>{0.0f}).isOk());
  std::vector<float> mean(1);
  auto closed = b.close(mean);
  CHECK(closed.samples == 4);
  CHECK(closed.mean_loss == doctest::Approx(5.0f));  // (1*2 + 3*6) / 4, not (2 + 6) / 2
}

TEST_CASE("step barrier: a skipped step arrives without weight") {
  StepBarrier b(2);
  b.configure(members({1, 2}));
  b.markActive(1);
  b.markActive(2);
  REQUIRE(b.add(1, 4, 2.0f, std::vector<float>{1.0f, -2.0f}).isOk());
  CHECK_FALSE(b.complete());
  REQUIRE(b.skip(2).isOk());  // member 2's gradient was not finite
  CHECK(b.complete());        // not waited for
  CHECK(b.skip(2).code() == Code::kFailedPrecondition);
  std::vector<float> mean(2);
  auto closed = b.close(mean);
  CHECK(mean == std::vector<float>{1.0f, -2.0f});  // member 1's alone
  CHECK(closed.samples == 4);
  CHECK(closed.mean_loss == doctest::Approx(2.0f));
  CHECK(sorted(closed.reported) == std::vector<std::uint64_t>{1, 2});
}

TEST_CASE("step barrier: a step every member skipped closes with no samples and a zero sum") {
  StepBarrier b(2);
  b.configure(members({1, 2}));
  REQUIRE(b.add(1, 4, 0.0f, std::vector<float>{3.0f, 3.0f}).isOk());
  std::vector<float> mean(2);
  b.close(mean);  // the buffer now holds this step's mean
  REQUIRE(b.skip(1).isOk());
  REQUIRE(b.skip(2).isOk());
  REQUIRE(b.complete());
  std::span<float> sum;
  float scale = 0;
  auto closed = b.closeUnscaled(&sum, &scale);
  CHECK(closed.samples == 0);  // the group PS applies no update (no division by zero)
  CHECK(closed.mean_loss == 0.0f);
  CHECK(scale == 1.0f);
  CHECK(std::all_of(sum.begin(), sum.end(), [](float v) { return v == 0.0f; }));
}

TEST_CASE("step barrier: only active members are waited for") {
  StepBarrier b(2);
  b.configure(members({1, 2, 3}));
  CHECK_FALSE(b.complete());  // nothing arrived yet
  b.markActive(1);
  b.markActive(2);
  REQUIRE(b.add(1, 8, 0.0f, std::vector<float>{1.0f, 1.0f}).isOk());
  CHECK_FALSE(b.complete());  // 2 is active and missing
  REQUIRE(b.add(2, 8, 0.0f, std::vector<float>{1.0f, 1.0f}).isOk());
  CHECK(b.complete());  // 3 never pulled: not waited for
}

TEST_CASE("step barrier: markActive makes an inactive member required") {
  StepBarrier b(1);
  b.configure(members({1, 2}));
  REQUIRE(b.add(1, 8, 0.0f, std::vector<float>{1.0f}).isOk());
  CHECK(b.complete());
  b.markActive(2);
  CHECK_FALSE(b.complete());
  CHECK(b.missing() == std::vector<std::uint64_t>{2});
  REQUIRE(b.add(2, 8, 0.0f, std::vector<float>{1.0f}).isOk());
  CHECK(b.complete());
}

TEST_CASE("step barrier: markActive of a non-member does nothing") {
  StepBarrier b(1);
  b.configure(members({1}));
  b.markActive(1);
  b.markActive(77);
  REQUIRE(b.add(1, 8, 0.0f, std::vector<float>{1.0f}).isOk());
  CHECK(b.complete());
  CHECK(b.missing().empty());
}

TEST_CASE("step barrier: a push marks its sender active") {
  StepBarrier b(1);
  b.configure(members({1, 2}));
  REQUIRE(b.add(1, 8, 0.0f, std::vector<float>{1.0f}).isOk());
  std::vector<float> mean(1);
  b.close(mean);
  // Next step: 1 pushed before, so it is now required even though it never pulled.
  b.markActive(2);
  REQUIRE(b.add(2, 8, 0.0f, std::vector<float>{1.0f}).isOk());
  CHECK_FALSE(b.complete());
  CHECK(b.missing() == std::vector<std::uint64_t>{1});
}

TEST_CASE("step barrier: a second push by the same worker in one step is refused") {
  StepBarrier b(2);
  b.configure(members({1, 2}));
  b.markActive(2);
  REQUIRE(b.add(1, 2, 0.0f, std::vector<float>{1.0f, 1.0f}).isOk());
  Status dup = b.add(1, 2, 0.0f, std::vector<float>{100.0f, 100.0f});
  CHECK(dup.code() == Code::kFailedPrecondition);
  CHECK(b.arrivals() == 1);
  REQUIRE(b.add(2, 2, 0.0f, std::vector<float>{3.0f, 3.0f}).isOk());
  std::vector<float> mean(2);
  auto closed = b.close(mean);
  CHECK(closed.samples == 4);
  CHECK(mean == std::vector<float>{2.0f, 2.0f});  // the duplicate did not count
}

TEST_CASE("step barrier: missing lists active members that have not reported") {
  StepBarrier b(1);
  b.configure(members({1, 2, 3, 4}));
  for (std::uint64_t id : {1, 2, 3}) b.markActive(id);
  CHECK(sorted(b.missing()) == std::vector<std::uint64_t>{1, 2, 3});
  REQUIRE(b.add(2, 8, 0.0f, std::vector<float>{1.0f}).isOk());
  CHECK(sorted(b.missing()) == std::vector<std::uint64_t>{1, 3});  // 4 is inactive
  CHECK(b.hasArrived(2));
  CHECK_FALSE(b.hasArrived(1));
}

TEST_CASE("step barrier: close resets for the next step") {
  StepBarrier b(2);
  b.configure(members({1, 2}));
  b.markActive(1);
  b.markActive(2);
  REQUIRE(b.add(1, 4, 1.0f, std::vector<float>{8.0f, 8.0f}).isOk());
  REQUIRE(b.add(2, 4, 3.0f, std::vector<float>{0.0f, 0.0f}).isOk());
  std::vector<float> mean(2);
  auto first = b.close(mean);
  CHECK(first.samples == 8);
  CHECK(mean == std::vector<float>{4.0f, 4.0f});

  CHECK(b.arrivals() == 0);
  CHECK_FALSE(b.complete());
  CHECK_FALSE(b.hasArrived(1));
  CHECK(sorted(b.missing()) == std::vector<std::uint64_t>{1, 2});  // still active
  // The same worker may push again; the old sum does not leak into the new mean.
  REQUIRE(b.add(1, 2, 5.0f, std::vector<float>{-2.0f, 6.0f}).isOk());
  REQUIRE(b.add(2, 2, 7.0f, std::vector<float>{2.0f, 2.0f}).isOk());
  auto second = b.close(mean);
  CHECK(second.samples == 4);
  CHECK(second.mean_loss == doctest::Approx(6.0f));
  CHECK(mean == std::vector<float>{0.0f, 4.0f});
}

TEST_CASE("step barrier: configure keeps a removed member's arrival in the open step") {
  StepBarrier b(1);
  b.configure(members({1, 2}));
  b.markActive(1);
  b.markActive(2);
  REQUIRE(b.add(1, 1, 1.0f, std::vector<float>{4.0f}).isOk());
  b.configure(members({2, 3}));  // 1 drained out of the group
  CHECK(b.member(1) == nullptr);
  CHECK(b.hasArrived(1));
  CHECK(b.arrivals() == 1);
  CHECK_FALSE(b.complete());  // 2 stays active and is still missing
  REQUIRE(b.add(2, 3, 1.0f, std::vector<float>{0.0f}).isOk());
  CHECK(b.complete());  // 3 is new and inactive
  std::vector<float> mean(1);
  auto closed = b.close(mean);
  CHECK(closed.samples == 4);
  CHECK(mean[0] == 1.0f);  // (1*4 + 3*0) / 4: the removed member's gradient counts
  CHECK(sorted(closed.reported) == std::vector<std::uint64_t>{1, 2});
}

TEST_CASE("step barrier: configure keeps the active flags of members that stay") {
  StepBarrier b(1);
  b.configure(members({1, 2, 3}));
  b.markActive(1);
  b.markActive(3);
  b.configure(members({1, 2, 4}));
  CHECK(sorted(b.missing()) == std::vector<std::uint64_t>{1});  // 3 left; 2 and 4 inactive
  b.configure(members({1, 3}));
  CHECK(sorted(b.missing()) == std::vector<std::uint64_t>{1});  // 3 came back inactive
}

TEST_CASE("step barrier: configure replaces member info") {
  StepBarrier b(1);
  b.configure({{5, 16, 2}});
  REQUIRE(b.member(5) != nullptr);
  CHECK(b.member(5)->batch_size == 16);
  CHECK(b.member(5)->epoch == 2);
  b.configure({{5, 32, 3}, {6, 8, 3}});
  CHECK(b.memberCount() == 2);
  CHECK(b.member(5)->batch_size == 32);
  CHECK(b.member(5)->epoch == 3);
  CHECK(b.member(7) == nullptr);
}

TEST_CASE("step barrier: a gradient of the wrong length is refused") {
  StepBarrier b(3);
  b.configure(members({1}));
  CHECK(b.add(1, 8, 0.0f, std::vector<float>{1.0f, 2.0f}).code() == Code::kInvalidArgument);
  CHECK(b.add(1, 8, 0.0f, std::vector<float>(4, 1.0f)).code() == Code::kInvalidArgument);
  CHECK(b.arrivals() == 0);
  CHECK_FALSE(b.hasArrived(1));
  // Refused pushes do not block the real one.
  REQUIRE(b.add(1, 8, 0.0f, std::vector<float>{1.0f, 2.0f, 3.0f}).isOk());
}

TEST_CASE("step barrier: a gradient of batch 0 is refused") {
  StepBarrier b(1);
  b.configure(members({1}));
  CHECK(b.add(1, 0, 0.0f, std::vector<float>{1.0f}).code() == Code::kInvalidArgument);
  CHECK(b.arrivals() == 0);
  CHECK_FALSE(b.complete());
}

TEST_CASE("step barrier: an excused member is not waited for until it is active again") {
  StepBarrier b(1);
  b.configure(members({1, 2, 3}));
  for (auto id : {1, 2, 3}) b.markActive(id);
  REQUIRE(b.add(1, 8, 0.0f, std::vector<float>{1.0f}).isOk());
  REQUIRE(b.add(2, 8, 0.0f, std::vector<float>{1.0f}).isOk());
  CHECK(b.missing() == std::vector<std::uint64_t>{3});
  b.excuse(3);  // the step closed without it
  CHECK(b.complete());
  CHECK(b.missing().empty());
  std::vector<float> mean(1);
  b.close(mean);
  REQUIRE(b.add(1, 8, 0.0f, std::vector<float>{1.0f}).isOk());
  REQUIRE(b.add(2, 8, 0.0f, std::vector<float>{1.0f}).isOk());
  CHECK(b.complete());  // still excused in the next step
  b.close(mean);
  b.markActive(3);  // it came back
  REQUIRE(b.add(1, 8, 0.0f, std::vector<float>{1.0f}).isOk());
  REQUIRE(b.add(2, 8, 0.0f, std::vector<float>{1.0f}).isOk());
  CHECK_FALSE(b.complete());
  b.excuse(3);
  b.configure(members({1, 2, 3}));  // a configuration keeps the excuse
  CHECK(b.complete());
  REQUIRE(b.add(3, 8, 0.0f, std::vector<float>{1.0f}).isOk());  // its push counts anyway
  auto closed = b.close(mean);
  CHECK(closed.samples == 24);
}
