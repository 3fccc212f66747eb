#include "groupsgd/worker/speed_schedule.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace groupsgd::worker {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

bool parseNumber(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*out);
}

}  // namespace

double emulatedSleepMs(const SpeedProfile& p, double compute_ms, double batch_scale) {
  const double total = p.slowdown * (compute_ms + p.device_ms * batch_scale);
  return std::max(0.0, total - compute_ms);
}

Result<SpeedSchedule> SpeedSchedule::parse(const std::string& text) {
  SpeedSchedule sched;
  if (text.empty()) return sched;
  for (const auto& entry : split(text, ',')) {
    auto parts = split(entry, ':');
    if (parts.size() < 2) {
      return invalidArgument("schedule entry '" + entry + "' needs AT:key=value");
    }
    ScheduleEntry e;
    std::string at = parts[0];
    if (!at.empty() && at.back() == 's') {
      e.at_seconds = true;
      at.pop_back();
    }
    if (!parseNumber(at, &e.at) || e.at < 0) {
      return invalidArgument("schedule entry '" + entry + "': '" + parts[0] +
                             "' is not a step number or a time like 30s");
    }
    for (std::size_t i = 1; i < parts.size(); ++i) {
      auto kv = split(parts[i], '=');
      double v = 0;
      if (kv.size() != 2 || !parseNumber(kv[1], &v)) {
        return invalidArgument("schedule entry '" + entry + "': bad setting '" + parts[i] + "'");
      }
      if (kv[0] == "slowdown") {
        if (v <= 0) return invalidArgument("slowdown must be > 0 in '" + entry + "'");
        e.slowdown = v;
      } else if (kv[0] == "device-ms") {
        if (v < 0) return invalidArgument("device-ms must be >= 0 in '" + entry + "'");
        e.device_ms = v;
      } else if (kv[0] == "link-ms") {
        if (v < 0) return invalidArgument("link-ms must be >= 0 in '" + entry + "'");
        e.link_ms = v;
      } else {
        return invalidArgument("schedule entry '" + entry + "': unknown key '" + kv[0] +
                               "' (slowdown, device-ms, link-ms)");
      }
    }
    sched.entries_.push_back(e);
  }
  return sched;
}

SpeedProfile SpeedSchedule::at(const SpeedProfile& base, std::uint64_t step, double seconds) const {
  SpeedProfile p = base;
  for (const auto& e : entries_) {
    const bool due = e.at_seconds ? seconds >= e.at : static_cast<double>(step) >= e.at;
    if (!due) continue;
    if (e.slowdown) p.slowdown = *e.slowdown;
    if (e.device_ms) p.device_ms = *e.device_ms;
    if (e.link_ms) p.link_ms = *e.link_ms;
  }
  return p;
}

}  // namespace groupsgd::worker
