#include "groupsgd/jobs/node_pool.h"

namespace groupsgd::jobs {

std::uint32_t NodePool::Node::used() const {
  std::uint32_t n = 0;
  for (const auto& [job, k] : placed) n += k;
  return n;
}

std::uint64_t NodePool::add(std::string host, std::string name, std::string public_key,
                            std::uint32_t slots) {
  const std::uint64_t id = next_id_++;
  nodes_[id] =
      Node{std::move(host), std::move(name), std::move(public_key), slots, Clock::now(), {}};
  return id;
}

bool NodePool::seen(std::uint64_t node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return false;
  it->second.last_seen = Clock::now();
  return true;
}

void NodePool::remove(std::uint64_t node) { nodes_.erase(node); }

std::vector<std::string> NodePool::expire(Clock::duration limit) {
  std::vector<std::string> gone;
  const auto now = Clock::now();
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (now - it->second.last_seen <= limit) {
      ++it;
      continue;
    }
    gone.push_back("node " + std::to_string(it->first - kFirstId + 1) + " (" + it->second.host +
                   (it->second.name.empty() ? "" : ", " + it->second.name) + ") with " +
                   std::to_string(it->second.used()) + " slot(s) in use");
    it = nodes_.erase(it);
  }
  return gone;
}

std::uint32_t NodePool::place(std::uint64_t job, std::uint32_t n) {
  std::uint32_t done = 0;
  for (; done < n; ++done) {
    Node* best = nullptr;
    std::uint32_t best_free = 0;
    for (auto& [id, node] : nodes_) {
      const std::uint32_t f = node.slots - std::min(node.slots, node.used());
      if (f > best_free) {
        best = &node;
        best_free = f;
      }
    }
    if (best == nullptr) break;
    ++best->placed[job];
  }
  return done;
}

void NodePool::release(std::uint64_t job) {
  for (auto& [id, node] : nodes_) node.placed.erase(job);
}

std::uint32_t NodePool::placed(std::uint64_t job) const {
  std::uint32_t n = 0;
  for (const auto& [id, node] : nodes_) {
    if (auto it = node.placed.find(job); it != node.placed.end()) n += it->second;
  }
  return n;
}

std::uint32_t NodePool::free() const { return total() - std::min(total(), inUse()); }

std::uint32_t NodePool::total() const {
  std::uint32_t n = 0;
  for (const auto& [id, node] : nodes_) n += node.slots;
  return n;
}

std::uint32_t NodePool::inUse() const {
  std::uint32_t n = 0;
  for (const auto& [id, node] : nodes_) n += std::min(node.slots, node.used());
  return n;
}

const NodePool::Node* NodePool::find(std::uint64_t node) const {
  auto it = nodes_.find(node);
  return it == nodes_.end() ? nullptr : &it->second;
}

}  // namespace groupsgd::jobs
