// The node daemons of a multi-job daemon (docs/jobs.md, "Node daemons"): each registered
// at the front and offers a number of group PS slots to the daemon as a whole. A job
// takes slots here (the node with the most free first), its nodes serve them for it, and
// the job gives them back when it ends. A node that stops heartbeating is dropped with
// its slots. Plain data; the host loop's thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace groupsgd::jobs {

class NodePool {
 public:
  using Clock = std::chrono::steady_clock;
  // Pool ids live apart from worker ids, so a worker's leave or heartbeat that reaches
  // the front (its job coordinator silent) never names a node.
  static constexpr std::uint64_t kFirstId = std::uint64_t{1} << 56;

  struct Node {
    std::string host;
    std::string name;
    std::string public_key;  // CURVE ("" on plain links)
    std::uint32_t slots = 0;
    Clock::time_point last_seen;
    std::map<std::uint64_t, std::uint32_t> placed;  // job id -> slots serving it
    std::uint32_t used() const;
  };

  std::uint64_t add(std::string host, std::string name, std::string public_key,
                    std::uint32_t slots);
  // A heartbeat: false when the node is not (or no longer) in the pool.
  bool seen(std::uint64_t node);
  void remove(std::uint64_t node);
  // Drops the nodes silent for longer than limit; returns their descriptions.
  std::vector<std::string> expire(Clock::duration limit);
  // Places up to n more slots for the job, one at a time on the node with the most free
  // (the lowest id on ties); returns how many it placed.
  std::uint32_t place(std::uint64_t job, std::uint32_t n);
  void release(std::uint64_t job);
  std::uint32_t placed(std::uint64_t job) const;
  std::uint32_t free() const;
  std::uint32_t total() const;
  std::uint32_t inUse() const;
  const Node* find(std::uint64_t node) const;
  const std::map<std::uint64_t, Node>& nodes() const { return nodes_; }

 private:
  std::map<std::uint64_t, Node> nodes_;
  std::uint64_t next_id_ = kFirstId;
};

}  // namespace groupsgd::jobs
