// A node daemon's service of one coordinator (node.cc): the single-run node role, and
// each job a multi-job daemon places on a pooled node (node_pool_member.cc).
// Thread rule: each call on one thread, with a CoordinatorClient of that thread.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "groupsgd/client/client.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/daemon/config.h"

namespace groupsgd::node {

// The daemon configuration this room is built from (daemon/).
using daemon::DaemonConfig;

// Registration with back-off until the coordinator answers (it may start after us, or
// be restarting), for at most give_up_s.
Result<client::Assignment> registerNode(client::CoordinatorClient& coord, client::Role role,
                                        const std::vector<std::string>& endpoints,
                                        const std::atomic<bool>& stop, double give_up_s);

class NodeCentralShard;

enum class HeadEnd { kStopped, kHeadLost, kFailed, kPooled };

// Serves one head incarnation: learns the central PS and the model's size, binds
// cfg.node_groups group PSes for cfg.job_id, offers them, heartbeats. Returns kHeadLost
// when a restarted head does not know this node (its group PSes point at the old central
// PS, so they are rebuilt from scratch), and kPooled when the endpoint is a multi-job
// daemon's front that took this node into its pool (the probe's assignment in *pooled).
// shard: the central shard this node hosts (node_central_shard): kFailed when the run's
// shard map does not have it here.
HeadEnd serveHead(const DaemonConfig& cfg, zmq::context_t& ctx, client::CoordinatorClient& coord,
                  const CurveKeys& curve_keys, const std::atomic<bool>& stop_requested,
                  const std::function<void()>& between_heartbeats,
                  client::Assignment* pooled = nullptr, const NodeCentralShard* shard = nullptr);

}  // namespace groupsgd::node
