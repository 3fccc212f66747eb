#include "groupsgd/common/quarantine.h"

#include <doctest/doctest.h>

using groupsgd::QuarantinePolicy;
using namespace std::chrono_literals;

TEST_CASE("quarantine: the Nth bad update within the window quarantines the worker") {
  QuarantinePolicy q(3, 10000ms);
  const auto t0 = QuarantinePolicy::Clock::time_point{} + 1h;
  CHECK_FALSE(q.recordBad(7, t0));
  CHECK_FALSE(q.recordBad(7, t0 + 1s));
  CHECK_FALSE(q.isQuarantined(7));
  CHECK(q.recordBad(7, t0 + 2s));
  CHECK(q.isQuarantined(7));
  CHECK_FALSE(q.recordBad(7, t0 + 3s));  // reported once
  CHECK(q.quarantined().size() == 1);
  CHECK_FALSE(q.isQuarantined(8));
}

TEST_CASE("quarantine: bad updates older than the window are forgotten") {
  QuarantinePolicy q(3, 10000ms);
  const auto t0 = QuarantinePolicy::Clock::time_point{} + 1h;
  CHECK_FALSE(q.recordBad(1, t0));
  CHECK_FALSE(q.recordBad(1, t0 + 1s));
  CHECK_FALSE(q.recordBad(1, t0 + 12s));  // the first two fell out of the window
  CHECK(q.recentBad(1) == 1);
  CHECK_FALSE(q.recordBad(1, t0 + 13s));
  CHECK(q.recordBad(1, t0 + 14s));
}

TEST_CASE("quarantine: workers are counted apart; clear lifts it; 0 disables") {
  QuarantinePolicy q(2, 10000ms);
  const auto t0 = QuarantinePolicy::Clock::time_point{} + 1h;
  CHECK_FALSE(q.recordBad(1, t0));
  CHECK_FALSE(q.recordBad(2, t0));
  CHECK(q.recordBad(2, t0 + 1s));
  CHECK_FALSE(q.isQuarantined(1));
  q.clear(2);
  CHECK_FALSE(q.isQuarantined(2));
  CHECK_FALSE(q.recordBad(2, t0 + 2s));  // counting starts again
  QuarantinePolicy off(0, 10000ms);
  for (int i = 0; i < 100; ++i) CHECK_FALSE(off.recordBad(1, t0));
  CHECK_FALSE(off.isQuarantined(1));
}
