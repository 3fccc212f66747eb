#include "groupsgd/worker/speed_schedule.h"

#include <doctest/doctest.h>

#include <string>

using namespace groupsgd;
using namespace groupsgd::worker;

namespace {

// The message of a parse error, which must be kInvalidArgument.
std::string parseError(const std::string& text) {
  auto r = SpeedSchedule::parse(text);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == Code::kInvalidArgument);
  return r.status().message();
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("speed: a step lasts F * (compute + device); the sleep is the rest") {
  CHECK(emulatedSleepMs({4.0, 10.0}, 2.0) == 46.0);  // 4 * 12 - 2
  CHECK(emulatedSleepMs({2.0, 0.0}, 5.0) == 5.0);    // 2 * 5 - 5
  CHECK(emulatedSleepMs({1.0, 10.0}, 3.0) == 10.0);  // device time alone
}

TEST_CASE("speed: slowdown 1 without device time never sleeps") {
  CHECK(emulatedSleepMs({1.0, 0.0}, 0.0) == 0.0);
  CHECK(emulatedSleepMs({1.0, 0.0}, 17.5) == 0.0);
}

TEST_CASE("speed: a speed-up below 1 never gives a negative sleep") {
  CHECK(emulatedSleepMs({0.5, 0.0}, 10.0) == 0.0);
}

TEST_CASE("speed schedule: an empty text is an empty schedule that keeps the base profile") {
  auto s = SpeedSchedule::parse("");
  REQUIRE(s.isOk());
  CHECK(s->empty());
  auto p = s->at({3.0, 7.0}, 1000, 1000.0);
  CHECK(p.slowdown == 3.0);
  CHECK(p.device_ms == 7.0);
}

TEST_CASE("speed schedule: step and time triggers apply from their step / second on") {
  auto s = SpeedSchedule::parse("200:slowdown=4,30s:slowdown=1:device-ms=10");
  REQUIRE(s.isOk());
  CHECK_FALSE(s->empty());
  const SpeedProfile base{2.0, 5.0};

  auto before = s->at(base, 199, 29.9);
  CHECK(before.slowdown == 2.0);
  CHECK(before.device_ms == 5.0);

  auto at_step = s->at(base, 200, 0.0);
  CHECK(at_step.slowdown == 4.0);
  CHECK(at_step.device_ms == 5.0);  // the step entry does not touch device-ms

  auto at_time = s->at(base, 0, 30.0);
  CHECK(at_time.slowdown == 1.0);
  CHECK(at_time.device_ms == 10.0);

  // Both due: applied in the order written, so the later (time) entry wins.
  auto both = s->at(base, 500, 45.0);
  CHECK(both.slowdown == 1.0);
  CHECK(both.device_ms == 10.0);
}

TEST_CASE("speed schedule: entries apply in the order written, not by trigger") {
  auto s = SpeedSchedule::parse("10s:slowdown=3,100:slowdown=8");
  REQUIRE(s.isOk());
  CHECK(s->at({}, 100, 10.0).slowdown == 8.0);
  CHECK(s->at({}, 99, 10.0).slowdown == 3.0);
  CHECK(s->at({}, 100, 9.0).slowdown == 8.0);
}

TEST_CASE("speed schedule: fractional times and step 0 are accepted") {
  auto s = SpeedSchedule::parse("0:device-ms=2.5,1.5s:slowdown=2");
  REQUIRE(s.isOk());
  auto p = s->at({}, 0, 1.49);
  CHECK(p.device_ms == 2.5);
  CHECK(p.slowdown == 1.0);
  CHECK(s->at({}, 0, 1.5).slowdown == 2.0);
}

TEST_CASE("speed schedule: a setting without '=' is refused, naming it") {
  auto m = parseError("200:slowdown4");
  CHECK(contains(m, "slowdown4"));
}

TEST_CASE("speed schedule: an entry without any setting is refused") {
  auto m = parseError("200");
  CHECK(contains(m, "AT:key=value"));
}

TEST_CASE("speed schedule: an unknown key is refused, naming it and the valid keys") {
  auto m = parseError("200:speed=4");
  CHECK(contains(m, "speed"));
  CHECK(contains(m, "device-ms"));
}

TEST_CASE("speed schedule: a negative device-ms is refused") {
  auto m = parseError("200:device-ms=-1");
  CHECK(contains(m, "device-ms"));
}

TEST_CASE("speed schedule: slowdown 0 or below is refused") {
  CHECK(contains(parseError("200:slowdown=0"), "slowdown"));
  CHECK(contains(parseError("200:slowdown=-2"), "slowdown"));
}

TEST_CASE("speed schedule: a bad AT is refused, naming it") {
  CHECK(contains(parseError("soon:slowdown=2"), "soon"));
  CHECK(contains(parseError("-5:slowdown=2"), "-5"));
  CHECK(contains(parseError("10m:slowdown=2"), "10m"));
  CHECK(contains(parseError(":slowdown=2"), "step number"));
  CHECK(contains(parseError("s:slowdown=2"), "step number"));
}

TEST_CASE("speed schedule: a value that is not a finite number is refused") {
  parseError("200:slowdown=fast");
  parseError("200:slowdown=");
  parseError("200:slowdown=inf");
  parseError("200:device-ms=nan");
}

TEST_CASE("speed schedule: one bad entry among good ones fails the whole schedule") {
  auto m = parseError("10:slowdown=2,20:bogus=1,30:slowdown=3");
  CHECK(contains(m, "bogus"));
}
