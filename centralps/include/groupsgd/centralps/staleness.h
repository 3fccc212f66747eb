// Staleness weighting f(tau) for the central merge: how much a delta that was cut from
// a model tau versions (or mean deltas' worth of samples) old still counts. The
// functions are pure (any thread); SampleStaleness belongs to the central PS thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <string_view>
#include <utility>

namespace groupsgd::centralps {

enum class StalenessRule {
  kInverse,   // f = 1 / (1 + tau)                       (default; Zhang et al. 2016)
  kConstant,  // f = 1                                    (Downpour-style)
  kGrace,     // f = 1 for tau <= grace, then 1/(1 + 0.5 (tau - grace)): with G groups,
              // grace = G - 1 spares the staleness round-robin exchanges cause anyway
};

// What tau counts. Versions treat every merged delta alike; with groups of unequal size
// (a straggler alone in its group, exchanging as often as the big group) that halves the
// big group's every delta for the straggler's small one merged in between.
enum class StalenessMeasure {
  kSamples,   // samples merged since the delta's base / mean samples per merged delta
              // (default; equals the version count when deltas are alike)
  kVersions,  // versions merged since the delta's base
};

struct StalenessConfig {
  StalenessRule rule = StalenessRule::kInverse;
  StalenessMeasure measure = StalenessMeasure::kSamples;
  std::uint64_t grace = 0;           // kGrace: staleness tolerated at full weight (G - 1)
  std::uint64_t max_staleness = 16;  // tau above this is refused; the group resyncs
};

bool parseStalenessRule(std::string_view text, StalenessRule* out);
const char* stalenessRuleName(StalenessRule rule);
bool parseStalenessMeasure(std::string_view text, StalenessMeasure* out);
const char* stalenessMeasureName(StalenessMeasure measure);
// tau may be fractional (StalenessMeasure::kSamples).
float stalenessWeight(const StalenessConfig& cfg, double tau);

// Staleness in samples: remembers how many samples the model had merged at each of its
// last versions, and the mean samples per merged delta. Owned by the central PS thread.
class SampleStaleness {
 public:
  // window: how many versions back a base is remembered (max_staleness: a delta staler
  // than that is refused anyway), at most kMaxWindow; an older base falls back to
  // counting versions.
  static constexpr std::uint64_t kMaxWindow = 1024;
  explicit SampleStaleness(std::uint64_t window) : window_(std::min(window, kMaxWindow)) {}
  // Samples merged since base_version / mean samples per delta; nullopt when base_version
  // is not remembered (before a restore) or nothing with samples was merged yet.
  std::optional<double> tau(std::uint64_t base_version) const;
  // A delta of `samples` was merged; the model is at `version` now.
  void merged(std::uint64_t version, std::uint64_t samples);
  // The model was restored at `version`: earlier versions are forgotten.
  void restart(std::uint64_t version);

 private:
  std::uint64_t window_;
  std::uint64_t total_ = 0;  // samples merged since the last restart
  double mean_ = 0;          // running mean of samples per delta (deltas with samples)
  std::deque<std::pair<std::uint64_t, std::uint64_t>> at_{{0, 0}};  // (version, total_)
};

}  // namespace groupsgd::centralps
