#include "groupsgd/centralps/staleness.h"

#include <algorithm>

namespace groupsgd::centralps {

bool parseStalenessRule(std::string_view text, StalenessRule* out) {
  if (text == "inverse")
    *out = StalenessRule::kInverse;
  else if (text == "constant")
    *out = StalenessRule::kConstant;
  else if (text == "grace")
    *out = StalenessRule::kGrace;
  else
    return false;
  return true;
}

const char* stalenessRuleName(StalenessRule rule) {
  switch (rule) {
    case StalenessRule::kInverse:
      return "inverse";
    case StalenessRule::kConstant:
      return "constant";
    case StalenessRule::kGrace:
      return "grace";
  }
  return "unknown";
}

bool parseStalenessMeasure(std::string_view text, StalenessMeasure* out) {
  if (text == "samples")
    *out = StalenessMeasure::kSamples;
  else if (text == "versions")
    *out = StalenessMeasure::kVersions;
  else
    return false;
  return true;
}

const char* stalenessMeasureName(StalenessMeasure measure) {
  switch (measure) {
    case StalenessMeasure::kSamples:
      return "samples";
    case StalenessMeasure::kVersions:
      return "versions";
  }
  return "unknown";
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
