#include "groupsgd/common/backoff.h"

#include <doctest/doctest.h>

using groupsgd::Backoff;
using groupsgd::backoffDelay;
using groupsgd::BackoffPolicy;
using std::chrono::milliseconds;

TEST_CASE("backoff: doubles from the initial delay and stops at the cap") {
  const BackoffPolicy p{milliseconds(100), milliseconds(1000), 0.0};
  CHECK(backoffDelay(p, 0, 0.5) == milliseconds(100));
  CHECK(backoffDelay(p, 1, 0.5) == milliseconds(200));
  CHECK(backoffDelay(p, 3, 0.5) == milliseconds(800));
  CHECK(backoffDelay(p, 4, 0.5) == milliseconds(1000));
  CHECK(backoffDelay(p, 4000000000u, 0.5) == milliseconds(1000));  // no overflow
}

TEST_CASE("backoff: jitter shortens a delay by at most its fraction") {
  const BackoffPolicy p{milliseconds(1000), milliseconds(32000), 0.25};
  CHECK(backoffDelay(p, 0, 0.0) == milliseconds(1000));
  CHECK(backoffDelay(p, 0, 1.0) == milliseconds(750));
  CHECK(backoffDelay(p, 5, 0.5) == milliseconds(28000));  // 32000 * (1 - 0.125)
  // Out-of-range inputs are clamped, never negative or zero.
  CHECK(backoffDelay({milliseconds(0), milliseconds(0), 5.0}, 0, 7.0) == milliseconds(1));
}

TEST_CASE("backoff: a Backoff object follows the schedule within its jitter and resets") {
  Backoff b({milliseconds(100), milliseconds(400), 0.2}, 42);
  const long expected[] = {100, 200, 400, 400};
  for (long e : expected) {
    const auto d = b.next().count();
    CHECK(d <= e);
    CHECK(d >= e * 8 / 10);
  }
  CHECK(b.attempts() == 4);
  b.reset();
  CHECK(b.next().count() <= 100);
}
