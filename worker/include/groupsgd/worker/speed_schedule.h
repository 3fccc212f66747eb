// Heterogeneity emulation for one worker: a slowdown factor F and an emulated device
// time D per step (a step whose real compute took c ms lasts F * (c + D) ms), and a
// schedule that changes F and D at given steps or times. Pure; any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "groupsgd/common/status.h"

namespace groupsgd::worker {

struct SpeedProfile {
  double slowdown = 1.0;  // F >= 1 typically; > 0 required
  double device_ms = 0.0; // D >= 0
};

// Milliseconds to sleep after a step whose real compute took compute_ms.
double emulatedSleepMs(const SpeedProfile& p, double compute_ms);

struct ScheduleEntry {
  bool at_seconds = false;  // trigger on elapsed time instead of step count
  double at = 0;            // step number or seconds since the worker started
  std::optional<double> slowdown;
  std::optional<double> device_ms;
};

// Text form: entries separated by ',', each "AT:key=value[:key=value]", AT a step number
// or seconds with an 's' suffix, keys 'slowdown' and 'device-ms'.
// Example: "200:slowdown=4,30s:slowdown=1:device-ms=10".
class SpeedSchedule {
 public:
  static Result<SpeedSchedule> parse(const std::string& text);
  // The profile in force at this step / time: base with every triggered entry applied in
  // the order they were written.
  SpeedProfile at(const SpeedProfile& base, std::uint64_t step, double seconds) const;
  bool empty() const { return entries_.empty(); }

 private:
  std::vector<ScheduleEntry> entries_;
};

}  // namespace groupsgd::worker
