// Where a group's PS runs against where its members run (ps_placement = hosts): a push and
// its reply between a trainer and a PS on the same host stay off the network, so the
// coordinator puts each group on the slot whose PS shares the host of most of its members
// — at a regroup (the controller's place(), given every slot's host) and when a trainer
// joins (among the least-loaded groups). Slots themselves do not move: a node daemon's
// group PSes are bound where they run.
#include <string>
#include <vector>

#include "groupsgd/common/host_name.h"
#include "groupsgd/coordinator/coordinator.h"

namespace groupsgd::coordinator {

std::string Coordinator::slotHost(std::uint32_t g) const {
  if (g >= fleet_->ready()) return "";
  if (const WorkerRecord* node = groupNode(g)) return node->host;
  static const std::string head = hostName();
  return head;
}

std::vector<std::string> Coordinator::slotHosts() const {
  if (cfg_.ps_placement != "hosts") return {};
  std::vector<std::string> hosts(fleet_->slots());
  for (std::uint32_t g = 0; g < hosts.size(); ++g) hosts[g] = slotHost(g);
  return hosts;
}

std::uint32_t Coordinator::localGroupFor(const std::string& host, std::uint32_t chosen,
                                         std::uint32_t slots) const {
  if (cfg_.ps_placement != "hosts" || host.empty() || slotHost(chosen) == host) return chosen;
  const std::size_t load = registry_.groupMembers(chosen).size();
  for (std::uint32_t g = 0; g < slots; ++g) {
    if (!groupFailed(g) && slotHost(g) == host && registry_.groupMembers(g).size() == load) {
      return g;
    }
  }
  return chosen;
}

nlohmann::ordered_json Coordinator::placementJson(std::uint32_t g) const {
  const std::string host = slotHost(g);
  std::size_t local = 0;
  const auto members = registry_.groupMembers(g);
  for (const auto* m : members) local += !host.empty() && m->host == host;
  std::string why;
  if (members.empty()) {
    why = "no members";
  } else if (cfg_.ps_placement != "hosts") {
    why = "ps_placement order: slots by overlap and load";
  } else {
    why =
        std::to_string(local) + " of " + std::to_string(members.size()) + " member(s) on its host";
  }
  return {{"host", host},
          {"node", groupNode(g) != nullptr ? nlohmann::ordered_json(fleet_->node(g)) : nullptr},
          {"members_on_host", local},
          {"placement", why}};
}

}  // namespace groupsgd::coordinator
