#include "groupsgd/worker/step_watch.h"

#include <doctest/doctest.h>

using groupsgd::worker::StepWatch;

TEST_CASE("step watch: early heartbeats after the first steps and on a shift, not on noise") {
  StepWatch w(3, 1.5);
  CHECK_FALSE(w.add(10));
  CHECK_FALSE(w.add(11));
  CHECK(w.add(10));  // the first three steps: report them at once
  w.reported();
  for (int i = 0; i < 50; ++i) CHECK_FALSE(w.add(i % 2 ? 12.5 : 8.5));  // +-25% noise
  w.reported();
  CHECK_FALSE(w.add(100));  // one stall
  CHECK_FALSE(w.add(10));
  CHECK_FALSE(w.add(40));  // slowed down: 1st and 2nd slow step
  CHECK_FALSE(w.add(41));
  CHECK(w.add(40));  // the 3rd: report it now
  w.reported();
  for (int i = 0; i < 20; ++i) CHECK_FALSE(w.add(40));  // the new normal
  w.reported();
  CHECK_FALSE(w.add(10));
  CHECK_FALSE(w.add(10));
  CHECK(w.add(10));  // recovered
}

TEST_CASE("step watch: a restart reports the first steps again") {
  StepWatch w(3, 1.5);
  for (int i = 0; i < 3; ++i) w.add(10);
  w.restart();
  CHECK_FALSE(w.add(10));
  CHECK_FALSE(w.add(10));
  CHECK(w.add(10));
}
