// The AdaptiveController window by window, fed step samples directly (no simulator):
// when a straggler change may regroup.
#include "groupsgd/adaptive/adaptive_controller.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>

using namespace groupsgd::adaptive;
using std::chrono::milliseconds;

namespace {

constexpr std::uint32_t kWorkers = 8;
constexpr std::uint32_t kBatch = 32;
// A normal step: 10 ms of compute at batch 32, 2 ms of exchange.
constexpr policy::StepSample kNormal{kBatch, 10.0, 2.0};
// A link straggler: 36 ms more per exchange, 4x the normal step.
constexpr policy::StepSample kSlowLink{kBatch, 10.0, 38.0};

struct Run {
  AdaptiveConfig cfg;
  AdaptiveController ctl{cfg, kBatch, 4};
  Registry reg;
  std::uint64_t steps = 0;
  AdaptiveController::Clock::time_point t0{};

  Run() {
    for (std::uint32_t i = 1; i <= kWorkers; ++i) {
      WorkerRecord w;
      w.id = i;
      w.batch_size = kBatch;
      w.group = 0;
      reg.add(w);
    }
  }
  // Ten steps of every worker, `slow` ones with the link straggler's sample; then the
  // window at `at_ms` after the start.
  ControlActions window(std::uint64_t at_ms, std::initializer_list<std::uint64_t> slow = {}) {
    for (int s = 0; s < 10; ++s) {
      ++steps;
      for (std::uint64_t id = 1; id <= kWorkers; ++id) {
        const bool is_slow = std::find(slow.begin(), slow.end(), id) != slow.end();
        ctl.observe(id, is_slow ? kSlowLink : kNormal, steps);
      }
    }
    return ctl.window(reg, t0 + milliseconds(at_ms), steps * kWorkers * kBatch, 0);
  }
};

bool alone(const policy::GroupPlan& plan, std::uint64_t id) {
  for (const auto& g : plan.groups) {
    if (std::find(g.begin(), g.end(), id) != g.end()) return g.size() == 1;
  }
  return false;
}

}  // namespace

TEST_CASE(
    "adaptive controller: a link straggler is split off once its onset has lasted 2 windows") {
  Run r;
  for (std::uint64_t w = 0; w < 3; ++w) CHECK_FALSE(r.window(w * 1000).regroup);
  auto onset = r.window(3000, {2});
  REQUIRE(onset.detections.size() == 1);
  CHECK(onset.detections[0].straggler);
  CHECK_FALSE(onset.regroup);  // a load spike must not split a group: wait
  CHECK_FALSE(r.window(4000, {2}).regroup);
  auto later = r.window(5000, {2});
  REQUIRE(later.regroup);
  CHECK(alone(later.regroup->plan, 2));
}

TEST_CASE("adaptive controller: another worker's recovery does not cut an onset's wait short") {
  Run r;
  for (std::uint64_t w = 0; w < 3; ++w) CHECK_FALSE(r.window(w * 1000).regroup);
  auto onsets = r.window(3000, {1, 2});
  CHECK(onsets.detections.size() == 2);
  CHECK_FALSE(onsets.regroup);
  // Worker 1 was a spike and recovers; worker 2's onset is 1 s old: still no regroup.
  auto recovery = r.window(4000, {2});
  REQUIRE(recovery.detections.size() == 1);
  CHECK_FALSE(recovery.detections[0].straggler);
  CHECK_FALSE(recovery.regroup);
  auto later = r.window(5000, {2});
  REQUIRE(later.regroup);
  CHECK(alone(later.regroup->plan, 2));
  CHECK_FALSE(alone(later.regroup->plan, 1));
}

TEST_CASE("adaptive controller: with slot hosts a group takes the slot on its members' host") {
  // Slots 0..3 run their PS on h0..h3; worker 2 runs on h3, the others on h0.
  for (const bool by_host : {false, true}) {
    CAPTURE(by_host);
    Run r;
    for (auto& [id, w] : r.reg.all()) r.reg.find(id)->host = id == 2 ? "h3" : "h0";
    if (by_host) r.ctl.setSlotHosts({"h0", "h1", "h2", "h3"});
    for (std::uint64_t w = 0; w < 3; ++w) CHECK_FALSE(r.window(w * 1000).regroup);
    r.window(3000, {2});
    r.window(4000, {2});
    auto later = r.window(5000, {2});
    REQUIRE(later.regroup);
    REQUIRE(alone(later.regroup->plan, 2));
    // Without hosts the split-off worker takes the first free slot; with them, its host's.
    CHECK(later.placement.at(2).slot == (by_host ? 3u : 1u));
    for (std::uint64_t id : {1, 3, 8}) CHECK(later.placement.at(id).slot == 0);
    CHECK(later.periods.size() == 4);
  }
}
