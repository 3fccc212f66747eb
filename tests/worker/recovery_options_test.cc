// The worker's recovery options: give-up time and registration back-off.
#include <doctest/doctest.h>

#include <string>
#include <vector>

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
  struct Case {
    std::vector<std::string> args;
    std::string names;  // the flag the refusal names
  };
  for (const Case& c : std::vector<Case>{
           {{"--give-up-s", "0"}, "--give-up-s"},
           {{"--backoff-initial-ms", "0"}, "--backoff-initial-ms"},
           {{"--backoff-initial-ms", "500", "--backoff-max-ms", "100"}, "--backoff-max-ms"}}) {
    CAPTURE(c.names);
    auto r = parseWorkerOptions(c.args);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().message().find(c.names) != std::string::npos);
  }
}
