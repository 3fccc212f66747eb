#include "groupsgd/coordinator/group_fleet.h"

namespace groupsgd::coordinator {

GroupFleet::GroupFleet(zmq::context_t& ctx, MessageLimits limits, std::uint32_t slots,
                       std::uint32_t period)
    : ctx_(ctx), limits_(limits), slots_(slots) {
  for (auto& s : slots_) s.period = period;
}

std::uint32_t GroupFleet::add(const std::string& endpoint, SocketOptions options,
                              std::uint64_t node) {
  const std::uint32_t g = ready_++;
  replace(g, endpoint, std::move(options), node);
  return g;
}

void GroupFleet::replace(std::uint32_t g, const std::string& endpoint, SocketOptions options,
                         std::uint64_t node) {
  Slot& s = slots_.at(g);
  s.client = std::make_unique<RpcClient>(ctx_, endpoint, limits_, std::move(options));
  s.node = node;
  s.failed = false;
}

std::vector<std::uint32_t> GroupFleet::failedGroups() const {
  std::vector<std::uint32_t> out;
  for (std::uint32_t g = 0; g < slots_.size(); ++g) {
    if (slots_[g].failed) out.push_back(g);
  }
  return out;
}

const std::string& GroupFleet::endpoint(std::uint32_t g) const {
  static const std::string kNone;
  return g < slots_.size() && slots_[g].client ? slots_[g].client->endpoint() : kNone;
}

CallTarget GroupFleet::link(std::uint32_t g) const {
  const Slot& s = slots_.at(g);
  return {s.client->endpoint(), s.client->options()};
}

}  // namespace groupsgd::coordinator
