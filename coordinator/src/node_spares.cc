#include "groupsgd/coordinator/node_spares.h"

namespace groupsgd::coordinator {

void NodeSpares::offer(std::uint64_t node, std::string endpoint) {
  by_node_[node].push_back(std::move(endpoint));
}

void NodeSpares::dropNode(std::uint64_t node) { by_node_.erase(node); }

std::optional<SpareSlot> NodeSpares::take() {
  auto best = by_node_.end();
  for (auto it = by_node_.begin(); it != by_node_.end(); ++it) {
    if (!it->second.empty() &&
        (best == by_node_.end() || it->second.size() > best->second.size())) {
      best = it;
    }
  }
  if (best == by_node_.end()) return std::nullopt;
  SpareSlot s{best->first, std::move(best->second.front())};
  best->second.erase(best->second.begin());
  return s;
}

std::size_t NodeSpares::count() const {
  std::size_t n = 0;
  for (const auto& [node, eps] : by_node_) n += eps.size();
  return n;
}

std::size_t NodeSpares::countOn(std::uint64_t node) const {
  auto it = by_node_.find(node);
  return it == by_node_.end() ? 0 : it->second.size();
}

}  // namespace groupsgd::coordinator
