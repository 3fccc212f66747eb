// The backup-worker cutoff's rule, with time passed in: how many may be left behind, when
// it has measured enough, and how long a step with its quorum in may wait.
#include "groupsgd/groupps/step_cutoff.h"

#include <doctest/doctest.h>

#include <initializer_list>

using namespace groupsgd::groupps;
using namespace std::chrono_literals;
using Clock = StepCutoff::Clock;

namespace {

// Steps whose quorum (all of `members` but the late allowance) came in these many
// microseconds after their release; returns the release time of the next, open step.
Clock::time_point feed(StepCutoff& c, std::size_t members, std::initializer_list<int> quorum_us,
                       Clock::time_point t = Clock::time_point{} + 1s) {
  for (int us : quorum_us) {
    c.stepReleased(t);
    c.pushArrived(members - c.maxLate(members), members, t + std::chrono::microseconds(us));
    t += std::chrono::microseconds(us) + 1ms;
  }
  c.stepReleased(t);
  return t;
}

StepCutoff cutoff(double factor, double late_fraction = 0.25) {
  StepCutoff c;
  c.configure({.factor = factor, .late_fraction = late_fraction});
  return c;
}

}  // namespace

TEST_CASE("step cutoff: off (factor 0) leaves nobody behind and sets no deadline") {
  StepCutoff c = cutoff(0);
  CHECK(c.maxLate(8) == 0);
  const auto open = feed(c, 8, {10000, 10000, 10000, 10000, 10000, 10000, 10000, 10000});
  for (std::size_t a = 1; a <= 8; ++a) c.pushArrived(a, 8, open + 10ms);
  CHECK_FALSE(c.allowance().has_value());
  CHECK_FALSE(c.deadline().has_value());
}

TEST_CASE("step cutoff: at most floor(members x fraction) may be late; small groups wait for all") {
  StepCutoff c = cutoff(1.5);
  CHECK(c.maxLate(8) == 2);
  CHECK(c.maxLate(7) == 1);
  CHECK(c.maxLate(4) == 1);
  CHECK(c.maxLate(3) == 0);  // 0.75 rounds down: a group of 3 waits for everyone
  CHECK(c.maxLate(1) == 0);
  CHECK(cutoff(1.5, 0.5).maxLate(4) == 2);
}

TEST_CASE("step cutoff: no deadline until enough steps are measured and the quorum is in") {
  StepCutoff c = cutoff(1.5);
  auto open = feed(c, 4, {10000, 10000, 10000, 10000, 10000, 10000, 10000});  // 7 of 8
  c.pushArrived(3, 4, open + 10ms);  // the 8th quorum time: now measured enough
  REQUIRE(c.allowance().has_value());
  CHECK(*c.allowance() == 15000us);  // 1.5 x the median of 10 ms
  REQUIRE(c.deadline().has_value());
  CHECK(*c.deadline() == open + 15ms);
  c.stepReleased(open + 20ms);  // the next step: no deadline before its quorum
  c.pushArrived(1, 4, open + 25ms);
  c.pushArrived(2, 4, open + 26ms);
  CHECK_FALSE(c.deadline().has_value());
  c.pushArrived(3, 4, open + 30ms);  // 3 of 4 with one allowed late: the quorum
  REQUIRE(c.deadline().has_value());
  CHECK(*c.deadline() == open + 20ms + 15ms);
  c.pushArrived(4, 4, open + 31ms);  // recorded once per step, at the quorum
  CHECK(*c.allowance() == 15000us);
}

TEST_CASE("step cutoff: a noisy group gets median + 4 MAD when that is more than the factor") {
  StepCutoff c = cutoff(1.5);
  // Median 12 ms, absolute deviations 4 3 2 1 0 1 2 3 4 -> MAD 2 ms: 12 + 8 = 20 > 18.
  feed(c, 8, {8000, 9000, 10000, 11000, 12000, 13000, 14000, 15000, 16000});
  REQUIRE(c.allowance().has_value());
  CHECK(*c.allowance() == 20000us);
  StepCutoff steady = cutoff(3.0);  // a generous factor wins over a small spread
  feed(steady, 8, {8000, 9000, 10000, 11000, 12000, 13000, 14000, 15000, 16000});
  CHECK(*steady.allowance() == 36000us);
}

TEST_CASE("step cutoff: only the newest window of quorum times counts; reset forgets them") {
  StepCutoff c = cutoff(1.5);
  auto open = feed(c, 8, {});
  for (int i = 0; i < 32; ++i) open = feed(c, 8, {100000}, open);
  CHECK(*c.allowance() == 150000us);
  for (int i = 0; i < 32; ++i) open = feed(c, 8, {10000}, open);  // the group sped up
  CHECK(*c.allowance() == 15000us);
  c.configure({.factor = 2.0, .late_fraction = 0.25});  // keeps the times
  CHECK(*c.allowance() == 20000us);
  c.reset();
  CHECK_FALSE(c.allowance().has_value());
}

TEST_CASE("step cutoff: new members restart the measurement; the same members keep it") {
  StepCutoff c = cutoff(1.5);
  c.setMembers({1, 2, 3, 4});
  feed(c, 4, {10000, 10000, 10000, 10000, 10000, 10000, 10000, 10000});
  REQUIRE(c.allowance().has_value());
  c.setMembers({4, 3, 2, 1});  // the same group (new batches, say): kept
  CHECK(c.allowance().has_value());
  c.setMembers({1, 2, 3, 5});  // another member: measured again before it acts
  CHECK_FALSE(c.allowance().has_value());
}
