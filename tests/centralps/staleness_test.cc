#include "groupsgd/centralps/staleness.h"

#include <doctest/doctest.h>

#include <string>

using namespace groupsgd::centralps;

TEST_CASE("staleness: the inverse rule weighs a delta tau versions old by 1/(1+tau)") {
  StalenessConfig cfg;
  cfg.rule = StalenessRule::kInverse;
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
  StalenessConfig cfg;
  cfg.rule = StalenessRule::kConstant;
  for (std::uint64_t tau : {0u, 1u, 5u, 1000u}) CHECK(stalenessWeight(cfg, tau) == 1.0f);
}

TEST_CASE("staleness: the grace rule is 1 up to grace, then 1/(1 + 0.5 (tau - grace))") {
  StalenessConfig cfg;
  cfg.rule = StalenessRule::kGrace;
  cfg.grace = 2;
  CHECK(stalenessWeight(cfg, 0) == 1.0f);
  CHECK(stalenessWeight(cfg, 1) == 1.0f);
  CHECK(stalenessWeight(cfg, 2) == 1.0f);
  CHECK(stalenessWeight(cfg, 3) == doctest::Approx(1.0 / 1.5));
  CHECK(stalenessWeight(cfg, 4) == 0.5f);
  CHECK(stalenessWeight(cfg, 8) == 0.25f);
}

TEST_CASE("staleness: grace 0 halves the decay of the inverse rule") {
  StalenessConfig cfg;
  cfg.rule = StalenessRule::kGrace;
  cfg.grace = 0;
  CHECK(stalenessWeight(cfg, 0) == 1.0f);
  CHECK(stalenessWeight(cfg, 2) == 0.5f);
}

TEST_CASE("staleness: rule names parse and round-trip") {
  for (StalenessRule r : {StalenessRule::kInverse, StalenessRule::kConstant, StalenessRule::kGrace}) {
    StalenessRule parsed = r == StalenessRule::kInverse ? StalenessRule::kGrace
                                                        : StalenessRule::kInverse;
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
