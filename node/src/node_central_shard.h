// A node daemon hosting central shard node_central_shard (docs/shards.md, "Who runs what"):
// the shard's own central PS, bound on bind_host with its own checkpoints as a role
// central-shard process has them, on a thread of its own from start() until destroyed; and
// the offer the node registers with. It outlives the heads it serves: a restarted head is
// offered the same shard at the same endpoint.
// Thread rule: start(), offer(), checkInMap() and the destructor on the node's thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "groupsgd/centralps/central_server.h"
#include "groupsgd/client/client.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/daemon/config.h"

namespace groupsgd::node {

class NodeCentralShard {
 public:
  // Binds shard cfg.node_central_shard of cfg's cut and starts serving it.
  static Result<std::unique_ptr<NodeCentralShard>> start(zmq::context_t& ctx,
                                                         const daemon::DaemonConfig& cfg,
                                                         const CurveKeys& keys);
  ~NodeCentralShard();  // stops the shard (its final checkpoint) and joins its thread
  NodeCentralShard(const NodeCentralShard&) = delete;
  NodeCentralShard& operator=(const NodeCentralShard&) = delete;

  const client::CentralShardOffer& offer() const { return offer_; }
  // Whether the run's central endpoint (a shard map, Assignment.centralEndpoint) has this
  // shard at this node's endpoint; else another node serves it, or the run is not sharded
  // as this node is.
  Status checkInMap(const std::string& central_endpoint, std::uint64_t param_count) const;

 private:
  NodeCentralShard() = default;
  std::unique_ptr<centralps::CentralServer> server_;
  client::CentralShardOffer offer_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace groupsgd::node
