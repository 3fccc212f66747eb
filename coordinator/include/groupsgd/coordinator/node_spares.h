// Group PS endpoints that node daemons offered beyond the groups in use: where a failed
// group's slot is re-created (docs/reliability.md, "Node failure"). Plain data; the
// coordinator thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace groupsgd::coordinator {

struct SpareSlot {
  std::uint64_t node = 0;  // the node daemon's worker id
  std::string endpoint;    // its unconfigured group PS
};

class NodeSpares {
 public:
  void offer(std::uint64_t node, std::string endpoint);
  // The node is gone: its spare group PSes went with it.
  void dropNode(std::uint64_t node);
  // Takes a spare from the node with the most left (the lowest node id on ties), so the
  // groups spread over the surviving nodes; nullopt when none is left.
  std::optional<SpareSlot> take();
  std::size_t count() const;
  std::size_t countOn(std::uint64_t node) const;

 private:
  std::map<std::uint64_t, std::vector<std::string>> by_node_;
};

}  // namespace groupsgd::coordinator
