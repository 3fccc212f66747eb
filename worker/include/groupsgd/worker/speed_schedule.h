// Heterogeneity emulation for one worker: a slowdown factor F, an emulated device time D
// per step at the reference batch (scaled by batch / reference batch, like real device
// work), so a step whose real compute took c ms lasts F * (c + D * b / b_ref) ms; a link
// delay L added to every push (a slow network, which no batch size can hide); and a
// schedule that changes F, D and L at given steps or times. Pure; any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "groupsgd/common/status.h"

namespace groupsgd::worker {

struct SpeedProfile {
  double slowdown = 1.0;   // F >= 1 typically; > 0 required
  double device_ms = 0.0;  // D >= 0, at the reference batch
  double link_ms = 0.0;    // L >= 0, added to every push
};

// Milliseconds to sleep after a step whose real compute took compute_ms, at a batch of
// batch_scale times the reference batch.
double emulatedSleepMs(const SpeedProfile& p, double compute_ms, double batch_scale = 1.0);

struct ScheduleEntry {
  bool at_seconds = false;  // trigger on elapsed time instead of step count
  double at = 0;            // step number or seconds since the worker started
  std::optional<double> slowdown;
  std::optional<double> device_ms;
  std::optional<double> link_ms;
};

// Text form: entries separated by ',', each "AT:key=value[:key=value]", AT a step number
// or seconds with an 's' suffix, keys 'slowdown', 'device-ms' and 'link-ms'.
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
