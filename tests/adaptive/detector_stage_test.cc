#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <random>

#include "groupsgd/adaptive/policy/speed_model.h"
#include "groupsgd/adaptive/policy/stage_controller.h"
#include "groupsgd/adaptive/policy/straggler_detector.h"

using namespace groupsgd::adaptive::policy;

namespace {

// Eight workers stepping together; worker 8's step time is `slow(step)` x the others'.
// Returns the changes of each round, evaluated after every step as the coordinator would
// after an early heartbeat. Step times carry multiplicative noise of +-`noise`.
struct Fleet {
  StragglerDetector d;
  std::mt19937 rng{7};
  double noise = 0.1;
  std::uint64_t step = 0;
  explicit Fleet(StragglerConfig cfg = {}) : d(cfg) {}
  std::vector<StragglerChange> round(double slow_factor, std::size_t slow_workers = 1) {
    std::uniform_real_distribution<double> jitter(1.0 - noise, 1.0 + noise);
    ++step;
    for (std::uint64_t id = 1; id <= 8; ++id) {
      const bool slow = id > 8 - slow_workers;
      d.addStep(id, 12.0 * jitter(rng) * (slow ? slow_factor : 1.0), step);
    }
    return d.evaluate();
  }
};

// The first change the detector reports within 10 rounds at `slowdown`, if any.
std::optional<StragglerChange> firstChange(Fleet& f, double slowdown) {
  for (int i = 0; i < 10; ++i) {
    auto c = f.round(slowdown);
    if (!c.empty()) return c.front();
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("detector: a 4x onset is flagged within 5 steps, its recovery within 5 steps") {
  Fleet f;
  for (int i = 0; i < 20; ++i) REQUIRE(f.round(1.0).empty());
  const std::uint64_t onset = f.step + 1;
  const std::optional<StragglerChange> on = firstChange(f, 4.0);
  REQUIRE(on);
  CHECK(on->worker == 8);
  CHECK(on->straggler);
  CHECK(on->step - onset + 1 <= 5);  // steps of the straggler since the onset, inclusive
  CHECK(on->step - onset + 1 == 3);  // exactly three slow steps are needed
  CHECK(on->ratio == doctest::Approx(4.0).epsilon(0.3));
  CHECK(f.d.isStraggler(8));
  CHECK(f.d.stragglers() == 1);
  for (int i = 0; i < 30; ++i) CHECK(f.round(4.0).empty());  // stays flagged, no repeats
  const std::uint64_t back = f.step + 1;
  const std::optional<StragglerChange> off = firstChange(f, 1.0);
  REQUIRE(off);
  CHECK(off->worker == 8);
  CHECK_FALSE(off->straggler);
  CHECK(off->step - back + 1 <= 5);
  CHECK_FALSE(f.d.isStraggler(8));
}

TEST_CASE("detector: noise within bounds flags nobody") {
  Fleet f;
  f.noise = 0.3;  // every step anywhere in 0.7x..1.3x: far more than a quiet machine
  for (int i = 0; i < 2000; ++i) REQUIRE(f.round(1.0).empty());
  // A worker 1.6x slow is between the two ratios: no change either way (hysteresis).
  f.noise = 0.1;
  for (int i = 0; i < 200; ++i) REQUIRE(f.round(1.6).empty());
}

TEST_CASE("detector: a single outlier step, or two apart, is ignored") {
  Fleet f;
  for (int i = 0; i < 10; ++i) f.round(1.0);
  CHECK(f.round(20.0).empty());  // one stall of 20x
  for (int i = 0; i < 5; ++i) CHECK(f.round(1.0).empty());
  for (int i = 0; i < 20; ++i) CHECK(f.round(i % 2 == 0 ? 10.0 : 1.0).empty());  // every other step
  CHECK(f.d.stragglers() == 0);
  // A flagged straggler with one quick step stays flagged.
  for (int i = 0; i < 3; ++i) f.round(4.0);
  REQUIRE(f.d.isStraggler(8));
  CHECK(f.round(1.0).empty());
  for (int i = 0; i < 5; ++i) CHECK(f.round(4.0).empty());
  CHECK(f.d.isStraggler(8));
}

TEST_CASE(
    "detector: half the workers slow are still stragglers (the reference is the 40th percentile)") {
  Fleet f;
  for (int i = 0; i < 5; ++i) f.round(1.0);
  std::size_t flagged = 0;
  for (int i = 0; i < 5; ++i) flagged += f.round(4.0, 4).size();
  CHECK(flagged == 4);
  CHECK(f.d.stragglers() == 4);
  for (std::uint64_t id = 5; id <= 8; ++id) CHECK(f.d.isStraggler(id));
}

TEST_CASE("detector: the configured step counts and ratios are used") {
  Fleet f({1.5, 5, 1.2, 4});
  for (int i = 0; i < 5; ++i) f.round(1.0);
  for (int i = 0; i < 4; ++i) CHECK(f.round(2.0).empty());
  auto c = f.round(2.0);  // the fifth slow step
  REQUIRE(c.size() == 1);
  CHECK(c.front().steps == 5);
  f.d.forget(8);
  CHECK_FALSE(f.d.isStraggler(8));
}

TEST_CASE("detector: a worker's first steps are not judged") {
  Fleet f;
  for (int i = 0; i < 4; ++i) CHECK(f.round(4.0).empty());  // slow from its first step
  CHECK(f.round(4.0).size() == 1);                          // judged from its fifth
}

TEST_CASE("speed model: a restarted estimate follows the new speed at once") {
  SpeedEstimator e(16, 0.2);
  for (int i = 0; i < 16; ++i) e.add({32, 16.0, 1.0});
  for (int i = 0; i < 3; ++i) e.add({32, 64.0, 1.0});
  CHECK(e.estimate(1).samples_per_ms > 1.5);  // the trimmed window still says 2/ms
  e.keepLast(3);
  CHECK(e.samples() == 3);
  CHECK(e.estimate(1).samples_per_ms == doctest::Approx(0.5));
}

TEST_CASE("speed model: fits overhead and throughput from varying batches, ignores a stall") {
  SpeedEstimator e(32, 0.2);
  for (int i = 0; i < 30; ++i) {
    const std::uint32_t b = 16 + 8 * (i % 4);
    e.add({b, 5.0 + b / 2.0, 1.0});  // 5 ms fixed + 2 samples/ms, 1 ms comm
  }
  e.add({32, 500.0, 1.0});  // a stall
  auto s = e.estimate(9);
  CHECK(s.id == 9);
  CHECK(s.samples_per_ms == doctest::Approx(2.0).epsilon(0.05));
  CHECK(s.overhead_ms == doctest::Approx(6.0).epsilon(0.1));  // 5 fixed + 1 comm
}

TEST_CASE("speed model: with one batch size, throughput from the trimmed mean") {
  SpeedEstimator e(16, 0.2);
  for (int i = 0; i < 16; ++i) e.add({32, i == 5 ? 400.0 : 16.0, 2.0});
  auto s = e.estimate(1);
  CHECK(s.samples_per_ms == doctest::Approx(2.0).epsilon(0.02));
  CHECK(s.overhead_ms == doctest::Approx(2.0));
  CHECK(trimmedMean({1, 2, 3, 100}, 0.25) == doctest::Approx(2.5));
}

TEST_CASE("stages: profiling -> coarse after the profiled steps -> fine when the loss flattens") {
  StageConfig cfg;
  cfg.profile_steps = 10;
  cfg.loss_window = 3;
  cfg.flat_threshold = 0.05;
  StageController s(cfg);
  CHECK(s.stage() == Stage::kProfiling);
  CHECK(s.maxGroups() == 1);
  CHECK_FALSE(s.update(9, 2.0, 0, 0));
  auto c = s.update(10, 2.0, 0, 0);
  REQUIRE(c);
  CHECK(c->to == Stage::kCoarse);
  CHECK(s.exchangePeriod() == cfg.coarse_period);
  double loss = 2.0;
  for (int i = 0; i < 6; ++i) CHECK_FALSE(s.update(100, loss *= 0.8, 0, 0));  // improving fast
  std::optional<StageChange> f;
  for (int i = 0; i < 6 && !f; ++i) f = s.update(100, loss, 0, 0);  // flat
  REQUIRE(f);
  CHECK(f->to == Stage::kFine);
  CHECK(f->cause.find("flattened") != std::string::npos);
  CHECK(s.exchangePeriod() == cfg.fine_period);
}

TEST_CASE("stages: without profile_steps (the default) training starts in the coarse stage") {
  StageController s;
  CHECK(s.stage() == Stage::kCoarse);
  CHECK(s.maxGroups() == StageConfig{}.coarse_max_groups);
  CHECK_FALSE(s.update(0, 2.0, 0, 0));
}

TEST_CASE("stages: coarse -> fine at the configured fraction of the sample budget") {
  StageConfig cfg;
  cfg.profile_steps = 1;
  StageController s(cfg);
  REQUIRE(s.update(1, 2.0, 0, 1000));
  CHECK_FALSE(s.update(5, 1.0, 400, 1000));
  auto f = s.update(6, 1.0, 500, 1000);
  REQUIRE(f);
  CHECK(f->to == Stage::kFine);
}

namespace {

// Worker 8 pauses now and then: with probability `p` a step lasts `pause` x the others'.
std::vector<StragglerChange> erraticRound(Fleet& f, std::mt19937& rng, double p, double pause) {
  std::bernoulli_distribution paused(p);
  const double factor = paused(rng) ? pause : 1.0;
  return f.round(factor);
}

}  // namespace

TEST_CASE("detector: an erratic worker (10% of steps paused 30x) is flagged and stays flagged") {
  StragglerConfig full_window_only;
  full_window_only.erratic_early_window = 0;
  Fleet f(full_window_only);
  std::mt19937 rng(11);
  for (int i = 0; i < 20; ++i) REQUIRE(f.round(1.0).empty());
  std::optional<StragglerChange> on;
  std::uint64_t onset_round = 0;
  for (int i = 0; i < 300 && !on; ++i) {
    auto c = erraticRound(f, rng, 0.1, 30.0);
    for (const auto& x : c) {
      if (x.worker == 8 && x.straggler) on = x, onset_round = f.step;
    }
  }
  REQUIRE(on);
  CHECK(on->erratic);
  CHECK(on->steps == 96);
  CHECK(on->spikes >= 3);
  CHECK(on->ratio >= 2.0);
  CHECK(onset_round <= 20 + 150);  // the first full window, or soon after
  CHECK(f.d.isErratic(8));
  // Three quick steps in a row are what it does most of the time: no flapping.
  std::size_t changes = 0;
  for (int i = 0; i < 3000; ++i) changes += erraticRound(f, rng, 0.1, 30.0).size();
  CHECK(changes == 0);
  CHECK(f.d.isStraggler(8));
  // Recovered for good: cleared once the mean of two windows is back near the others'.
  std::optional<StragglerChange> off;
  const std::uint64_t back = f.step + 1;
  for (int i = 0; i < 300 && !off; ++i) {
    auto c = f.round(1.0);
    if (!c.empty()) off = c.front();
  }
  REQUIRE(off);
  CHECK_FALSE(off->straggler);
  CHECK(off->erratic);
  CHECK(off->steps == 192);
  CHECK(off->step - back + 1 <= 192);
  CHECK(off->step - back + 1 >= 20);  // the old pauses must first leave the window
  CHECK_FALSE(f.d.isStraggler(8));
  CHECK_FALSE(f.d.isErratic(8));
}

TEST_CASE("detector: the early window flags a 4x erratic worker well before the full window") {
  // 10% of steps paused 30x: the mean step is 3.9x the others'. Over 20 seeds the early
  // rule decides on its 32-step window, a median of a few dozen steps after the onset.
  std::vector<std::uint64_t> delays;
  for (unsigned seed = 1; seed <= 20; ++seed) {
    Fleet f;
    f.rng.seed(seed);
    std::mt19937 rng(seed + 100);
    for (int i = 0; i < 20; ++i) REQUIRE(f.round(1.0).empty());
    std::optional<StragglerChange> on;
    for (int i = 0; i < 300 && !on; ++i) {
      for (const auto& x : erraticRound(f, rng, 0.1, 30.0)) {
        if (x.worker == 8 && x.straggler) on = x;
      }
    }
    REQUIRE(on);
    // Three paused steps in a row (0.1% of steps) let the run rule decide first now and then.
    if (on->erratic) {
      CHECK(on->spikes >= 3);
      if (on->steps == 32) CHECK(on->ratio >= 3.0);
    }
    delays.push_back(f.step - 20);
  }
  std::sort(delays.begin(), delays.end());
  CHECK(delays[delays.size() / 2] <= 60);  // the full window alone: >= 96 - 20 = 76
  CHECK(delays.back() <= 150);
}

TEST_CASE("detector: a late joiner's slow first steps are not an erratic onset") {
  Fleet f;
  for (int i = 0; i < 100; ++i) REQUIRE(f.round(1.0).empty());
  // Worker 9 joins: its 5 warm-up steps take 20x (start-up), then it runs like the others.
  // Those steps alone would put its first 32-step mean at 4x; the early window starts
  // after them. (The run rule may flag and clear it around its warm-up: not erratic.)
  std::size_t erratic = 0;
  for (int i = 0; i < 200; ++i) {
    f.d.addStep(9, i < 5 ? 240.0 : 12.0, i + 1);
    for (const auto& c : f.round(1.0)) erratic += c.worker == 9 && c.erratic;
  }
  CHECK(erratic == 0);
  CHECK_FALSE(f.d.isStraggler(9));
}

TEST_CASE("detector: load that pauses every worker now and then makes no erratic straggler") {
  Fleet f;
  std::mt19937 rng(3);
  std::bernoulli_distribution paused(0.1);
  std::size_t changes = 0;
  for (int i = 0; i < 2000; ++i) {
    ++f.step;
    for (std::uint64_t id = 1; id <= 8; ++id) f.d.addStep(id, paused(rng) ? 120.0 : 12.0, f.step);
    // Three paused steps in a row do happen (1 in 1000 steps): the run rule may fire.
    for (const auto& c : f.d.evaluate()) changes += c.erratic;
  }
  CHECK(changes == 0);  // the means move together
}

TEST_CASE("detector: rare pauses (2% of steps, 10x) are not an erratic straggler") {
  Fleet f;
  std::mt19937 rng(5);
  std::size_t changes = 0;
  for (int i = 0; i < 3000; ++i) changes += erraticRound(f, rng, 0.02, 10.0).size();
  CHECK(changes == 0);  // mean 1.18x: far below the 2x onset
}

TEST_CASE("speed model: an erratic worker's pauses count as per-step overhead once flagged") {
  SpeedEstimator e(16, 0.2);
  for (int i = 0; i < 64; ++i) e.add({32, i % 10 == 0 ? 376.0 : 16.0, 2.0});  // 360 ms pauses
  const auto trimmed = e.estimate(1);
  CHECK(trimmed.samples_per_ms == doctest::Approx(2.0).epsilon(0.02));
  CHECK(trimmed.overhead_ms == doctest::Approx(2.0));  // the pauses trimmed away
  e.countStalls(true);
  const auto counted = e.estimate(1);
  CHECK(counted.samples_per_ms == doctest::Approx(2.0).epsilon(0.02));
  // 7 pauses of 360 ms in the last 64 steps: 39.4 ms a step, whatever the batch.
  CHECK(counted.overhead_ms == doctest::Approx(2.0 + 7 * 360.0 / 64).epsilon(0.02));
  CHECK(counted.stepMs(8) > counted.stepMs(0) + 3.9);
}
