// The stop heard during a group wait: the wait ends only once the group PS stayed silent
// for a heartbeat period (at least 50 ms) after the first time the stop was heard.
#include <doctest/doctest.h>

#include "groupsgd/worker/group_wait.h"

using groupsgd::worker::StopGrace;
using namespace std::chrono_literals;

TEST_CASE("stop grace: over a heartbeat period after the first stop heard, not before") {
  StopGrace grace;
  const auto t0 = StopGrace::Clock::now();
  CHECK_FALSE(grace.over(250, t0 + 10s));  // no stop heard: never over
  grace.heard(t0);
  CHECK_FALSE(grace.over(250, t0 + 250ms));
  CHECK(grace.over(250, t0 + 251ms));
  grace.heard(t0 + 200ms);  // the same stop heard again: the grace runs from the first
  CHECK(grace.over(250, t0 + 251ms));
}

TEST_CASE("stop grace: at least 50 ms, whatever the heartbeat period") {
  StopGrace grace;
  const auto t0 = StopGrace::Clock::now();
  grace.heard(t0);
  CHECK_FALSE(grace.over(0, t0 + 50ms));
  CHECK(grace.over(0, t0 + 51ms));
  CHECK(grace.over(10, t0 + 51ms));
}
