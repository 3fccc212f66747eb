#include "groupsgd/centralps/staleness.h"

#include <doctest/doctest.h>

#include <string>

using namespace groupsgd::centralps;

namespace {

StalenessConfig ruleOf(StalenessRule rule, std::uint64_t grace = 0) {
  StalenessConfig cfg;
  cfg.rule = rule;
  cfg.grace = grace;
  return cfg;
}

}  // namespace

TEST_CASE("staleness: the inverse rule weighs a delta tau versions old by 1/(1+tau)") {
  const StalenessConfig cfg = ruleOf(StalenessRule::kInverse);
  CHECK(stalenessWeight(cfg, 0) == 1.0f);
  CHECK(stalenessWeight(cfg, 1) == 0.5f);
  CHECK(stalenessWeight(cfg, 3) == 0.25f);
  CHECK(stalenessWeight(cfg, 9) == doctest::Approx(0.1f));
  CHECK(stalenessWeight(cfg, 7) < stalenessWeight(cfg, 6));
}

TEST_CASE("staleness: inverse is the default rule") {
  StalenessConfig cfg;
  CHECK(cfg.rule == StalenessRule::kInverse);
  CHECK(stalenessWeight(cfg, 1) == 0.5f);
}

TEST_CASE("staleness: the constant rule gives every delta full weight") {
  const StalenessConfig cfg = ruleOf(StalenessRule::kConstant);
  for (std::uint64_t tau : {0u, 1u, 5u, 1000u}) CHECK(stalenessWeight(cfg, tau) == 1.0f);
}

TEST_CASE("staleness: the grace rule is 1 up to grace, then 1/(1 + 0.5 (tau - grace))") {
  const StalenessConfig cfg = ruleOf(StalenessRule::kGrace, 2);
  CHECK(stalenessWeight(cfg, 0) == 1.0f);
  CHECK(stalenessWeight(cfg, 1) == 1.0f);
  CHECK(stalenessWeight(cfg, 2) == 1.0f);
  CHECK(stalenessWeight(cfg, 3) == doctest::Approx(1.0 / 1.5));
  CHECK(stalenessWeight(cfg, 4) == 0.5f);
  CHECK(stalenessWeight(cfg, 8) == 0.25f);
}

TEST_CASE("staleness: grace 0 halves the decay of the inverse rule") {
  const StalenessConfig cfg = ruleOf(StalenessRule::kGrace, 0);
  CHECK(stalenessWeight(cfg, 0) == 1.0f);
  CHECK(stalenessWeight(cfg, 2) == 0.5f);
}

TEST_CASE("staleness: rule names parse and round-trip") {
  for (StalenessRule r :
       {StalenessRule::kInverse, StalenessRule::kConstant, StalenessRule::kGrace}) {
    StalenessRule parsed =
        r == StalenessRule::kInverse ? StalenessRule::kGrace : StalenessRule::kInverse;
    REQUIRE(parseStalenessRule(stalenessRuleName(r), &parsed));
    CHECK(parsed == r);
  }
  StalenessRule r = StalenessRule::kInverse;
  REQUIRE(parseStalenessRule("constant", &r));
  CHECK(r == StalenessRule::kConstant);
  REQUIRE(parseStalenessRule("grace", &r));
  CHECK(r == StalenessRule::kGrace);
  REQUIRE(parseStalenessRule("inverse", &r));
  CHECK(r == StalenessRule::kInverse);
  CHECK(std::string(stalenessRuleName(StalenessRule::kGrace)) == "grace");
}

TEST_CASE("staleness: an unknown rule name is refused and leaves the output alone") {
  for (const char* bad : {"", "Inverse", "linear", "constant ", "grac"}) {
    StalenessRule r = StalenessRule::kGrace;
    CHECK_FALSE(parseStalenessRule(bad, &r));
    CHECK(r == StalenessRule::kGrace);
  }
}

TEST_CASE("staleness: samples is the default measure; measure names parse, bad ones are refused") {
  CHECK(StalenessConfig{}.measure == StalenessMeasure::kSamples);
  for (StalenessMeasure m : {StalenessMeasure::kSamples, StalenessMeasure::kVersions}) {
    StalenessMeasure parsed =
        m == StalenessMeasure::kSamples ? StalenessMeasure::kVersions : StalenessMeasure::kSamples;
    REQUIRE(parseStalenessMeasure(stalenessMeasureName(m), &parsed));
    CHECK(parsed == m);
  }
  for (const char* bad : {"", "Samples", "steps", "versions "}) {
    StalenessMeasure m = StalenessMeasure::kVersions;
    CHECK_FALSE(parseStalenessMeasure(bad, &m));
    CHECK(m == StalenessMeasure::kVersions);
  }
}

TEST_CASE("staleness: a fractional tau weighs between its neighbours; a negative one counts as 0") {
  StalenessConfig cfg;  // inverse
  CHECK(stalenessWeight(cfg, 0.25) == doctest::Approx(0.8));
  CHECK(stalenessWeight(cfg, -1.0) == 1.0f);
  cfg.rule = StalenessRule::kGrace;
  cfg.grace = 1;
  CHECK(stalenessWeight(cfg, 0.9) == 1.0f);
  CHECK(stalenessWeight(cfg, 3.0) == 0.5f);
}

TEST_CASE(
    "staleness in samples: equal deltas count as versions; a small delta between big ones counts "
    "little") {
  SampleStaleness s(16);
  CHECK_FALSE(s.tau(0).has_value());  // nothing merged: no mean yet
  // Equal deltas of 100 samples: tau is the version count.
  s.merged(1, 100);
  s.merged(2, 100);
  s.merged(3, 100);
  REQUIRE(s.tau(3).has_value());
  CHECK(*s.tau(3) == 0.0);
  CHECK(*s.tau(2) == doctest::Approx(1.0));
  CHECK(*s.tau(0) == doctest::Approx(3.0));

  // A big group (1,792 samples a delta) and a straggler alone in its group (64) take
  // turns: between two of the big group's deltas only 64 samples were merged.
  SampleStaleness t(16);
  std::uint64_t v = 0;
  for (int round = 0; round < 50; ++round) {
    t.merged(++v, 1792);
    t.merged(++v, 64);
  }
  // The big group's next delta is based on the version after its last one (v - 1).
  const double big = *t.tau(v - 1);
  CHECK(big < 0.1);  // 64 / ~928
  CHECK(big > 0.0);
  // The straggler's next delta is based on the version after its last one (v): nothing
  // merged since; had it been based on v - 2, the big delta counts ~2 mean deltas.
  CHECK(*t.tau(v) == 0.0);
  CHECK(*t.tau(v - 2) > 1.5);
}

TEST_CASE("staleness in samples: versions outside the window or before a restart are unknown") {
  SampleStaleness s(4);
  for (std::uint64_t v = 1; v <= 10; ++v) s.merged(v, 10);
  CHECK(s.tau(6).has_value());  // 10 - 4
  CHECK_FALSE(s.tau(5).has_value());
  CHECK_FALSE(s.tau(11).has_value());  // a version not reached
  s.restart(40);
  CHECK_FALSE(s.tau(40).has_value());  // no mean after a restart
  s.merged(41, 10);
  CHECK(*s.tau(40) == doctest::Approx(1.0));
  CHECK_FALSE(s.tau(9).has_value());
  // A zero-sample delta moves the version, not the mean.
  s.merged(42, 0);
  CHECK(*s.tau(41) == 0.0);
  CHECK(*s.tau(40) == doctest::Approx(1.0));
}
