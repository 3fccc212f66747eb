// Staleness weighting f(tau) for the central merge: how much a delta that was cut from
// a model tau versions old still counts. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string_view>

namespace groupsgd::centralps {

enum class StalenessRule {
  kInverse,   // f = 1 / (1 + tau)                       (default; Zhang et al. 2016)
  kConstant,  // f = 1                                    (Downpour-style)
  kGrace,     // f = 1 for tau <= grace, then 1/(1 + 0.5 (tau - grace)): with G groups,
              // grace = G - 1 spares the staleness round-robin exchanges cause anyway
};

struct StalenessConfig {
  StalenessRule rule = StalenessRule::kInverse;
  std::uint64_t grace = 0;          // kGrace: staleness tolerated at full weight (G - 1)
  std::uint64_t max_staleness = 16; // tau above this is refused; the group resyncs
};

bool parseStalenessRule(std::string_view text, StalenessRule* out);
const char* stalenessRuleName(StalenessRule rule);
float stalenessWeight(const StalenessConfig& cfg, std::uint64_t tau);

}  // namespace groupsgd::centralps
