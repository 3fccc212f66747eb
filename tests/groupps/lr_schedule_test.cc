// The learning-rate schedules' math: each kind at and around its boundaries, min_lr, a
// zero warm-up, and the problems that make a schedule unusable.
#include "groupsgd/groupps/lr_schedule.h"

#include <doctest/doctest.h>

#include <cmath>

#include <capnp/message.h>

using namespace groupsgd::groupps;

namespace {

LrSchedule schedule(LrScheduleKind kind) {
  LrSchedule s;
  s.kind = kind;
  s.base_lr = 0.4;
  s.warmup_samples = 100;
  s.decay_end_samples = 1100;
  s.min_lr = 0.04;
  s.step_samples = 500;
  s.step_gamma = 0.5;
  return s;
}

}  // namespace

TEST_CASE("lr schedule: names parse back to their kind; others are refused") {
  for (auto k : {LrScheduleKind::kConstant, LrScheduleKind::kWarmupLinear, LrScheduleKind::kCosine,
                 LrScheduleKind::kStep}) {
    LrScheduleKind back = LrScheduleKind::kConstant;
    REQUIRE(parseLrScheduleKind(lrScheduleKindName(k), &back));
    CHECK(back == k);
  }
  LrScheduleKind k = LrScheduleKind::kCosine;
  CHECK_FALSE(parseLrScheduleKind("linear", &k));
  CHECK(k == LrScheduleKind::kCosine);
}

TEST_CASE("lr schedule: warm-up rises linearly from 0 to lr for every kind") {
  for (auto kind : {LrScheduleKind::kConstant, LrScheduleKind::kWarmupLinear,
                    LrScheduleKind::kCosine, LrScheduleKind::kStep}) {
    CAPTURE(lrScheduleKindName(kind));
    const LrSchedule s = schedule(kind);
    CHECK(learningRateAt(s, 0) == 0.0);
    CHECK(learningRateAt(s, 25) == doctest::Approx(0.1));
    CHECK(learningRateAt(s, 50) == doctest::Approx(0.2));
    CHECK(learningRateAt(s, 99) == doctest::Approx(0.396));
    CHECK(learningRateAt(s, 100) == doctest::Approx(0.4));  // the warm-up's end: full lr
  }
}

TEST_CASE("lr schedule: constant stays at lr; zero warm-up starts at lr") {
  LrSchedule s = schedule(LrScheduleKind::kConstant);
  s.warmup_samples = 0;
  CHECK(learningRateAt(s, 0) == 0.4);
  CHECK(learningRateAt(s, 1'000'000'000) == 0.4);
  s = schedule(LrScheduleKind::kWarmupLinear);
  s.warmup_samples = 0;
  CHECK(learningRateAt(s, 0) == doctest::Approx(0.4));
  CHECK(learningRateAt(s, 550) == doctest::Approx(0.4 - 0.36 * 0.5));
}

TEST_CASE("lr schedule: warmup_linear decays linearly to min_lr at the end, then stays") {
  const LrSchedule s = schedule(LrScheduleKind::kWarmupLinear);
  CHECK(learningRateAt(s, 600) == doctest::Approx(0.22));  // half way: (0.4 + 0.04) / 2
  CHECK(learningRateAt(s, 350) == doctest::Approx(0.4 - 0.36 * 0.25));
  CHECK(learningRateAt(s, 1099) == doctest::Approx(0.04036));
  CHECK(learningRateAt(s, 1100) == doctest::Approx(0.04));
  CHECK(learningRateAt(s, 50'000) == doctest::Approx(0.04));
}

TEST_CASE("lr schedule: cosine follows half a cosine from lr to min_lr") {
  const LrSchedule s = schedule(LrScheduleKind::kCosine);
  CHECK(learningRateAt(s, 100) == doctest::Approx(0.4));
  CHECK(learningRateAt(s, 600) == doctest::Approx(0.22));  // cos(pi/2) = 0: the midpoint
  const double quarter = 0.04 + 0.36 * 0.5 * (1 + std::cos(3.14159265358979 * 0.25));
  CHECK(learningRateAt(s, 350) == doctest::Approx(quarter));
  CHECK(learningRateAt(s, 350) > learningRateAt(schedule(LrScheduleKind::kWarmupLinear), 350));
  CHECK(learningRateAt(s, 1100) == doctest::Approx(0.04));
  CHECK(learningRateAt(s, 9999) == doctest::Approx(0.04));
}

TEST_CASE("lr schedule: step multiplies by gamma every step_samples, not below min_lr") {
  LrSchedule s = schedule(LrScheduleKind::kStep);
  s.warmup_samples = 0;
  CHECK(learningRateAt(s, 0) == doctest::Approx(0.4));
  CHECK(learningRateAt(s, 499) == doctest::Approx(0.4));
  CHECK(learningRateAt(s, 500) == doctest::Approx(0.2));
  CHECK(learningRateAt(s, 999) == doctest::Approx(0.2));
  CHECK(learningRateAt(s, 1000) == doctest::Approx(0.1));
  CHECK(learningRateAt(s, 1500) == doctest::Approx(0.05));
  CHECK(learningRateAt(s, 2000) == doctest::Approx(0.04));  // 0.025 clamped to min_lr
  s.min_lr = 0;
  CHECK(learningRateAt(s, 2000) == doctest::Approx(0.025));
  s.step_gamma = 1;
  CHECK(learningRateAt(s, 1'000'000) == doctest::Approx(0.4));
}

TEST_CASE("lr schedule: problems name what is missing or out of range") {
  for (auto kind : {LrScheduleKind::kConstant, LrScheduleKind::kWarmupLinear,
                    LrScheduleKind::kCosine, LrScheduleKind::kStep}) {
    CHECK(lrScheduleProblem(schedule(kind)).empty());
  }
  LrSchedule s = schedule(LrScheduleKind::kCosine);
  s.decay_end_samples = 0;
  CHECK(lrScheduleProblem(s).find("set schedule_samples or max_samples") != std::string::npos);
  s.decay_end_samples = 100;  // = the warm-up
  CHECK(lrScheduleProblem(s).find("not after its warm-up") != std::string::npos);
  s = schedule(LrScheduleKind::kConstant);
  s.decay_end_samples = 0;  // constant needs no end
  CHECK(lrScheduleProblem(s).empty());
  s.min_lr = 0.5;
  CHECK(lrScheduleProblem(s).find("min_lr must be in [0, lr]") != std::string::npos);
  s = schedule(LrScheduleKind::kStep);
  s.step_samples = 0;
  CHECK(lrScheduleProblem(s).find("step_samples") != std::string::npos);
  s = schedule(LrScheduleKind::kStep);
  s.step_gamma = 1.5;
  CHECK(lrScheduleProblem(s).find("step_gamma") != std::string::npos);
  s.step_gamma = 0;
  CHECK(lrScheduleProblem(s).find("step_gamma") != std::string::npos);
  s = schedule(LrScheduleKind::kConstant);
  s.base_lr = 0;
  CHECK(lrScheduleProblem(s).find("> 0") != std::string::npos);
}

TEST_CASE("lr schedule: every field survives a round trip through GroupConfig's form") {
  for (auto kind : {LrScheduleKind::kConstant, LrScheduleKind::kWarmupLinear,
                    LrScheduleKind::kCosine, LrScheduleKind::kStep}) {
    CAPTURE(lrScheduleKindName(kind));
    const LrSchedule in = schedule(kind);
    capnp::MallocMessageBuilder message;
    auto builder = message.initRoot<groupsgd::proto::LrSchedule>();
    toProto(in, builder);
    const LrSchedule out = fromProto(builder.asReader());
    CHECK(out.kind == kind);
    CHECK(out.base_lr == doctest::Approx(0.4));
    CHECK(out.warmup_samples == 100);
    CHECK(out.decay_end_samples == 1100);
    CHECK(out.min_lr == doctest::Approx(0.04));
    CHECK(out.step_samples == 500);
    CHECK(out.step_gamma == doctest::Approx(0.5));
  }
}
