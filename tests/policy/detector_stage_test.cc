#include <doctest/doctest.h>

#include <random>

#include "groupsgd/daemon/policy/speed_model.h"
#include "groupsgd/daemon/policy/stage_controller.h"
#include "groupsgd/daemon/policy/straggler_detector.h"

using namespace groupsgd::daemon::policy;

namespace {
std::vector<WorkerSpeed> fleet(double slow_factor) {
  std::vector<WorkerSpeed> w;
  for (std::uint64_t i = 1; i <= 8; ++i) w.push_back({i, 0.0, 4.0});
  w[7].samples_per_ms /= slow_factor;
  return w;
}
}  // namespace

TEST_CASE("detector: flags after M slow windows, clears only after the longer recovery") {
  StragglerDetector d({1.5, 3, 1.2, 5});
  CHECK_FALSE(d.update(fleet(4), 32));
  CHECK_FALSE(d.update(fleet(4), 32));
  CHECK_FALSE(d.isStraggler(8));
  CHECK(d.update(fleet(4), 32));  // third consecutive window
  CHECK(d.isStraggler(8));
  CHECK_FALSE(d.isStraggler(1));
  for (int i = 0; i < 4; ++i) CHECK_FALSE(d.update(fleet(1), 32));
  CHECK(d.isStraggler(8));  // still flagged: recovery needs 5 windows
  CHECK(d.update(fleet(1), 32));
  CHECK_FALSE(d.isStraggler(8));
}

TEST_CASE("detector: a transient stall (one slow window) never flags") {
  StragglerDetector d({1.5, 3, 1.2, 5});
  for (int i = 0; i < 30; ++i) {
    d.update(fleet(i % 3 == 0 ? 4.0 : 1.0), 32);
    CHECK(d.stragglers() == 0);
  }
}

TEST_CASE("detector: noise around the median flags nobody") {
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(1.0, 0.08);
  StragglerDetector d;
  for (int i = 0; i < 200; ++i) {
    auto f = fleet(1);
    for (auto& w : f) w.samples_per_ms *= noise(rng);
    d.update(f, 32);
  }
  CHECK(d.stragglers() == 0);
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
