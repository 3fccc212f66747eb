#include "groupsgd/common/quarantine.h"

namespace groupsgd {

bool QuarantinePolicy::recordBad(std::uint64_t worker, Clock::time_point now) {
  if (after_ == 0 || isQuarantined(worker)) return false;
  auto& times = recent_[worker];
  times.push_back(now);
  while (!times.empty() && now - times.front() > window_) times.pop_front();
  if (times.size() < after_) return false;
  quarantined_.insert(worker);
  recent_.erase(worker);
  return true;
}

void QuarantinePolicy::clear(std::uint64_t worker) {
  quarantined_.erase(worker);
  recent_.erase(worker);
}

std::size_t QuarantinePolicy::recentBad(std::uint64_t worker) const {
  auto it = recent_.find(worker);
  return it == recent_.end() ? 0 : it->second.size();
}

}  // namespace groupsgd
