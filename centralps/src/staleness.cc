#include "groupsgd/centralps/staleness.h"

namespace groupsgd::centralps {

bool parseStalenessRule(std::string_view text, StalenessRule* out) {
  if (text == "inverse") *out = StalenessRule::kInverse;
  else if (text == "constant") *out = StalenessRule::kConstant;
  else if (text == "grace") *out = StalenessRule::kGrace;
  else return false;
  return true;
}

const char* stalenessRuleName(StalenessRule rule) {
  switch (rule) {
    case StalenessRule::kInverse: return "inverse";
    case StalenessRule::kConstant: return "constant";
    case StalenessRule::kGrace: return "grace";
  }
  return "unknown";
}

float stalenessWeight(const StalenessConfig& cfg, std::uint64_t tau) {
  switch (cfg.rule) {
    case StalenessRule::kInverse: return 1.0f / (1.0f + static_cast<float>(tau));
    case StalenessRule::kConstant: return 1.0f;
    case StalenessRule::kGrace:
      if (tau <= cfg.grace) return 1.0f;
      return 1.0f / (1.0f + 0.5f * static_cast<float>(tau - cfg.grace));
  }
  return 1.0f;
}

}  // namespace groupsgd::centralps
