// A trainer's start-up phase by phase, told once in one INFO line, so that a slow start is
// read off the log rather than guessed (scripts/bench.sh startup parses the line):
//   start-up: dataset 31 ms, registration 12 ms, first pull 4 ms, first step 95 ms; 142 ms
// The first step ends when its push is answered, so it includes the group's barrier:
// waiting for the group's last member. Thread rule: the trainer's thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdio>
#include <optional>

#include "groupsgd/common/log.h"

namespace groupsgd::worker {

class StartupPhases {
 public:
  enum Phase { kDataset, kRegistration, kFirstPull, kFirstStep, kCount };

  // The end of phase p, measured from the previous phase's end (the first: from creation).
  // Only the first mark of each phase counts; the last one logs the line.
  void mark(Phase p) {
    if (ends_[p] || reported_) return;
    ends_[p] = Clock::now();
    if (p != kFirstStep) return;
    reported_ = true;
    static constexpr const char* kNames[kCount] = {"dataset", "registration", "first pull",
                                                   "first step"};
    char line[256];
    int used = std::snprintf(line, sizeof line, "start-up:");
    Clock::time_point from = begun_;
    for (int i = 0; i < kCount; ++i) {
      if (!ends_[i]) continue;  // a phase skipped (e.g. a step retried before its pull)
      used += std::snprintf(line + used, sizeof line - used, "%s %s %.0f ms", i ? "," : "",
                            kNames[i], msBetween(from, *ends_[i]));
      from = *ends_[i];
    }
    std::snprintf(line + used, sizeof line - used, "; %.0f ms", msBetween(begun_, *ends_[p]));
    GSGD_INFO(line);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double msBetween(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  }
  Clock::time_point begun_ = Clock::now();
  std::array<std::optional<Clock::time_point>, kCount> ends_;
  bool reported_ = false;
};

}  // namespace groupsgd::worker
