// The simulator drives the real AdaptiveController; these check the policy end to end.
#include "groupsgd/adaptive/simulator.h"

#include <doctest/doctest.h>

using namespace groupsgd::adaptive;

namespace {

// The simulator's run of a scenario with every other setting at its default.
SimResult simulateScenario(const char* scenario) {
  SimConfig c;
  c.scenario = scenario;
  auto r = simulate(c);
  REQUIRE(r.isOk());
  return *r;
}

}  // namespace

TEST_CASE("simulator: a 4x compute straggler among 8 is absorbed by batches (no regroup)") {
  const SimResult r = simulateScenario("straggler");
  CHECK(r.regroups == 0);
  CHECK(r.final_groups == 1);
  CHECK(r.throughput_ratio > 0.85);  // one group waiting for a 4x straggler would give ~0.3
}

TEST_CASE("simulator: a link straggler gets its own group and throughput stays near ideal") {
  const SimResult r = simulateScenario("link");
  CHECK(r.final_groups == 2);
  CHECK(r.regroups >= 1);
  CHECK(r.throughput_ratio > 0.85);
  CHECK(r.mean_staleness < 1.5);
}

TEST_CASE("simulator: a worker alternating 1x/3x causes at most one regroup per dwell interval") {
  SimConfig c;
  c.scenario = "alternate";
  c.slowdown = 3;
  c.windows = 200;
  c.dwell_windows = 20;
  c.adaptive.min_batch = 24;  // the batch alone cannot absorb 3x: grouping is needed
  c.adaptive.min_regroup_interval_ms = 5000;
  auto r = simulate(c);
  REQUIRE(r.isOk());
  CHECK(r->regroups >= 2);                                // it does react...
  CHECK(r->regroups <= c.windows / c.dwell_windows + 1);  // ...without thrashing
}

TEST_CASE("simulator: steady heterogeneous fleets of 1,000 workers are planned without thrash") {
  SimConfig c;
  c.workers = 1000;
  c.windows = 30;
  c.scenario = "lognormal";
  auto r = simulate(c);
  REQUIRE(r.isOk());
  CHECK(r->regroups <= 2);
  CHECK(r->throughput_ratio > 0.7);
}

TEST_CASE("simulator: an unknown scenario is refused") {
  SimConfig c;
  c.scenario = "chaos";
  CHECK(simulate(c).status().code() == groupsgd::Code::kInvalidArgument);
}
