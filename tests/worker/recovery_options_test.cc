// The worker's recovery options: give-up time and registration back-off.
#include <doctest/doctest.h>

#include "groupsgd/worker/options.h"

using namespace groupsgd;
using namespace groupsgd::worker;

TEST_CASE("worker options: recovery defaults and flags") {
  auto d = parseWorkerOptions({});
  REQUIRE(d.isOk());
  CHECK(d->give_up_s == 600);
  CHECK(d->backoff_initial_ms == 100);
  CHECK(d->backoff_max_ms == 8000);
  auto o = parseWorkerOptions(
      {"--give-up-s", "90", "--backoff-initial-ms", "50", "--backoff-max-ms", "1000"});
  REQUIRE(o.isOk());
  CHECK(o->give_up_s == 90);
  CHECK(o->backoff_initial_ms == 50);
  CHECK(o->backoff_max_ms == 1000);
}

TEST_CASE("worker options: bad recovery values are refused, naming the flag") {
  auto zero = parseWorkerOptions({"--give-up-s", "0"});
  REQUIRE_FALSE(zero.isOk());
  CHECK(zero.status().message().find("--give-up-s") != std::string::npos);
  auto initial = parseWorkerOptions({"--backoff-initial-ms", "0"});
  REQUIRE_FALSE(initial.isOk());
  CHECK(initial.status().message().find("--backoff-initial-ms") != std::string::npos);
  auto order = parseWorkerOptions({"--backoff-initial-ms", "500", "--backoff-max-ms", "100"});
  REQUIRE_FALSE(order.isOk());
  CHECK(order.status().message().find("--backoff-max-ms") != std::string::npos);
}
