#include "groupsgd/coordinator/failure_ledger.h"

namespace groupsgd::coordinator {

nlohmann::json FailureLedger::json(std::uint64_t lost, std::uint64_t bound) const {
  if (failures_.empty()) return nlohmann::json::array();
  nlohmann::json out = failures_;
  out.back()["samples_lost_total"] = lost;
  out.back()["samples_lost_bound"] = bound;
  return out;
}

std::uint64_t FailureLedger::replaysTotal() const {
  std::uint64_t n = 0;
  for (const auto& [g, count] : group_replays_) n += count;
  return n;
}

}  // namespace groupsgd::coordinator
