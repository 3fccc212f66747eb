#include "groupsgd/centralps/staleness.h"

#include <algorithm>
#include <array>

#include "groupsgd/base/enum_names.h"

namespace groupsgd::centralps {

constexpr std::array<base::EnumName<StalenessRule>, 3> kStalenessRuleNames{{
    {StalenessRule::kInverse, "inverse"},
    {StalenessRule::kConstant, "constant"},
    {StalenessRule::kGrace, "grace"},
}};

constexpr std::array<base::EnumName<StalenessMeasure>, 2> kStalenessMeasureNames{{
    {StalenessMeasure::kSamples, "samples"},
    {StalenessMeasure::kVersions, "versions"},
}};

bool parseStalenessRule(std::string_view text, StalenessRule* out) {
  return base::parseInto(kStalenessRuleNames, text, out);
}

const char* stalenessRuleName(StalenessRule rule) {
  return base::nameOf(kStalenessRuleNames, rule);
}

bool parseStalenessMeasure(std::string_view text, StalenessMeasure* out) {
  return base::parseInto(kStalenessMeasureNames, text, out);
}

const char* stalenessMeasureName(StalenessMeasure measure) {
  return base::nameOf(kStalenessMeasureNames, measure);
}

float stalenessWeight(const StalenessConfig& cfg, double tau) {
  tau = std::max(0.0, tau);
  switch (cfg.rule) {
    case StalenessRule::kInverse:
      return static_cast<float>(1.0 / (1.0 + tau));
    case StalenessRule::kConstant:
      return 1.0f;
    case StalenessRule::kGrace: {
      const double grace = static_cast<double>(cfg.grace);
      if (tau <= grace) return 1.0f;
      return static_cast<float>(1.0 / (1.0 + 0.5 * (tau - grace)));
    }
  }
  return 1.0f;
}

std::optional<double> SampleStaleness::tau(std::uint64_t base_version) const {
  if (mean_ <= 0) return std::nullopt;
  for (auto it = at_.rbegin(); it != at_.rend(); ++it) {
    if (it->first == base_version) return static_cast<double>(total_ - it->second) / mean_;
    if (it->first < base_version) break;
  }
  return std::nullopt;
}

void SampleStaleness::merged(std::uint64_t version, std::uint64_t samples) {
  total_ += samples;
  if (samples > 0) {
    const double n = static_cast<double>(samples);
    mean_ = mean_ == 0 ? n : 0.9 * mean_ + 0.1 * n;
  }
  at_.emplace_back(version, total_);
  while (at_.size() > window_ + 1) at_.pop_front();
}

void SampleStaleness::restart(std::uint64_t version) {
  total_ = 0;
  mean_ = 0;
  at_.assign(1, {version, 0});
}

}  // namespace groupsgd::centralps
