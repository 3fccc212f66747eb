#include "groupsgd/node/node.h"

#include <functional>
#include <thread>

#include "groupsgd/client/client.h"
#include "groupsgd/common/backoff.h"
#include "groupsgd/common/log.h"
#include "groupsgd/daemon/arbiter_host.h"
#include "groupsgd/daemon/curve_setup.h"
#include "groupsgd/daemon/group_server_setup.h"
#include "groupsgd/groupps/group_server.h"
#include "node_central_shard.h"
#include "node_head.h"
#include "node_pool_member.h"

namespace groupsgd::node {

Result<client::Assignment> registerNode(client::CoordinatorClient& coord, client::Role role,
                                        const std::vector<std::string>& endpoints,
                                        const std::atomic<bool>& stop, double give_up_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<std::int64_t>(give_up_s * 1000));
  Backoff backoff({std::chrono::milliseconds(200), std::chrono::milliseconds(5000), 0.2});
  while (!stop.load() && std::chrono::steady_clock::now() < deadline) {
    auto a = coord.registerAs(role, "node", 0, endpoints);
    if (a || a.status().code() != Code::kUnavailable) return a;
    GSGD_WARN("coordinator not reachable or not ready (" << a.status().message() << "); retrying");
    std::this_thread::sleep_for(backoff.next());
  }
  return unavailable(stop.load() ? "stopped before registering" : "gave up registering");
}

namespace {

// This node's group PSes, each on a thread of its own, from start() until destroyed
// (which stops and joins them).
class NodeGroupServers {
 public:
  // Binds cfg.node_groups group PSes for a model of param_count parameters. Their optimizer
  // settings come from this node's configuration: give every daemon the same file.
  static Result<std::unique_ptr<NodeGroupServers>> start(const DaemonConfig& cfg,
                                                         zmq::context_t& ctx,
                                                         const client::Assignment& probe,
                                                         const CurveKeys& curve_keys) {
    std::unique_ptr<NodeGroupServers> s(new NodeGroupServers);
    for (std::uint32_t g = 0; g < cfg.node_groups; ++g) {
      // The group id is renumbered by the coordinator's GroupConfig.
      groupps::GroupServerConfig gcfg =
          groupServerConfig(cfg, g, probe.central_endpoint, curve_keys);
      gcfg.adopt_group_id = true;
      auto server = groupps::GroupServer::create(ctx, gcfg, probe.param_count,
                                                 "tcp://" + cfg.bind_host + ":*");
      if (!server) return server.status();
      s->endpoints_.push_back((*server)->endpoint());
      s->groups_.push_back(std::move(*server));
    }
    for (auto& g : s->groups_) {
      s->threads_.emplace_back([&g, stop = &s->stop_] { g->run(*stop); });
    }
    return s;
  }
  ~NodeGroupServers() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
  }
  const std::vector<std::string>& endpoints() const { return endpoints_; }

 private:
  NodeGroupServers() = default;
  std::vector<std::unique_ptr<groupps::GroupServer>> groups_;
  std::vector<std::string> endpoints_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// Heartbeats as node `me` until told to stop (kStopped), forgotten by a restarted head
// (kHeadLost) or the head silent for give_up_s (kFailed).
HeadEnd heartbeatAsNode(const DaemonConfig& cfg, client::CoordinatorClient& coord,
                        const client::Assignment& me, const std::atomic<bool>& stop_requested,
                        const std::function<void()>& between_heartbeats) {
  int failures = 0;
  auto last_answer = std::chrono::steady_clock::now();
  while (!stop_requested.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(me.heartbeat_ms));
    between_heartbeats();
    auto hb = coord.heartbeat(me, {});
    if (hb && hb->stop) {
      GSGD_INFO("the coordinator ends the run");
      return HeadEnd::kStopped;
    }
    if (hb && hb->reregister) {
      GSGD_WARN("the coordinator does not know this node (a restarted head?); re-registering");
      return HeadEnd::kHeadLost;
    }
    if (hb) {
      failures = 0;
      last_answer = std::chrono::steady_clock::now();
      continue;
    }
    if (hb.status().code() != Code::kUnavailable && failures % 10 == 0) {
      // Refused, not silent (a revoked key, say): say why.
      GSGD_WARN("heartbeat refused: " << hb.status().toString());
    }
    if (++failures % 10 == 0) {
      GSGD_WARN("coordinator silent for " << failures << " heartbeats; group PSes keep serving");
    }
    if (std::chrono::steady_clock::now() - last_answer >
        std::chrono::milliseconds(static_cast<std::int64_t>(cfg.give_up_s * 1000))) {
      GSGD_ERROR("coordinator silent for " << cfg.give_up_s << " s; giving up");
      return HeadEnd::kFailed;
    }
  }
  return HeadEnd::kStopped;
}

}  // namespace

HeadEnd serveHead(const DaemonConfig& cfg, zmq::context_t& ctx, client::CoordinatorClient& coord,
                  const CurveKeys& curve_keys, const std::atomic<bool>& stop_requested,
                  const std::function<void()>& between_heartbeats, client::Assignment* pooled,
                  const NodeCentralShard* shard) {
  // 1. Where is the central PS, and how big is the model? (asked as a tool, then left)
  auto probe = registerNode(coord, client::Role::kTool, {}, stop_requested, cfg.give_up_s);
  if (!probe) {
    if (stop_requested.load()) return HeadEnd::kStopped;
    if (probe.status().code() == Code::kFinished) {
      GSGD_INFO("the run is over (" << probe.status().message() << ")");
      return HeadEnd::kStopped;
    }
    if (probe.status().code() == Code::kUnavailable) {
      GSGD_ERROR("cannot reach the coordinator at " << cfg.coordinator << ": "
                                                    << probe.status().toString());
    } else {
      GSGD_ERROR("the coordinator at " << cfg.coordinator
                                       << " refused this node: " << probe.status().toString());
    }
    return HeadEnd::kFailed;
  }
  if (shard != nullptr && !probe->node_pool) {
    // The head took another node's offer for this shard, or runs another cut.
    if (Status s = shard->checkInMap(probe->central_endpoint, probe->param_count); !s) {
      GSGD_ERROR(s.message());
      (void)coord.leave(*probe, 0, 0);
      return HeadEnd::kFailed;
    }
  }
  if (probe->node_pool) {
    // A multi-job daemon's front: its jobs are placed on this node (node_pool_member.h).
    if (pooled != nullptr) *pooled = *probe;
    return HeadEnd::kPooled;
  }
  (void)coord.leave(*probe, 0, 0);
  // 2. Bind the group PSes.
  auto servers = NodeGroupServers::start(cfg, ctx, *probe, curve_keys);
  if (!servers) {
    GSGD_ERROR("group PS: " << servers.status().toString());
    return HeadEnd::kFailed;
  }
  // 3. Offer them, then stay alive until told to stop or the head forgets us.
  const auto& endpoints = (*servers)->endpoints();
  auto me = registerNode(coord, client::Role::kNode, endpoints, stop_requested, cfg.give_up_s);
  if (!me) {
    GSGD_ERROR("node registration failed: " << me.status().toString());
    return stop_requested.load() || me.status().code() == Code::kFinished ? HeadEnd::kStopped
                                                                          : HeadEnd::kFailed;
  }
  GSGD_INFO("node " << me->worker_id << " offers " << endpoints.size() << " group PS(es)"
                    << (shard != nullptr
                            ? " and serves central shard " + std::to_string(shard->offer().index)
                            : std::string()));
  const HeadEnd end = heartbeatAsNode(cfg, coord, *me, stop_requested, between_heartbeats);
  if (end != HeadEnd::kHeadLost) (void)coord.leave(*me, 0, 0);
  return end;  // the group PSes stop with `servers`
}

int runNode(const DaemonConfig& cfg, const std::atomic<bool>& stop_requested,
            std::atomic<bool>* reload_requested) {
  log::setThreadTag("node");
  // --coordinator may list several head endpoints, tried in turn (worker/endpoint_list.h).
  if (auto list = client::EndpointList::parse(cfg.coordinator); !list) {
    GSGD_ERROR("configuration: " << list.status().message());
    return 2;
  }
  zmq::context_t ctx(2);
  // The node serves group PSes with its own key pair (or the head's, shared, without
  // curve.server_key_file): ZAP before any bind.
  auto curve = startCurve(ctx, cfg);
  if (!curve) {
    GSGD_ERROR("CURVE: " << curve.status().toString());
    return 1;
  }
  auto arbiter = startArbiter(ctx, cfg, curve->keys);  // this node's devices (arbiter_listen)
  if (!arbiter) {
    GSGD_ERROR(arbiter.status().toString());
    return 1;
  }
  client::CoordinatorClient coord(ctx, cfg.coordinator, cfg.job_id,
                                  std::chrono::milliseconds(cfg.coordinator_timeout_ms),
                                  curve->keys);
  // node_central_shard: the shard serves from now until the node exits, whichever heads
  // come and go; every registration offers it (a head gathering its shards takes it).
  std::unique_ptr<NodeCentralShard> shard;
  if (cfg.node_central_shard != 0) {
    auto started = NodeCentralShard::start(ctx, cfg, curve->keys);
    if (!started) {
      GSGD_ERROR(started.status().toString());
      return 1;
    }
    shard = std::move(*started);
    coord.offerCentralShard(shard->offer());
  }
  // At a multi-job daemon's front this offer puts the node into the daemon's pool; a
  // single run's coordinator ignores it.
  coord.offerGroupSlots(cfg.node_groups);
  // SIGHUP: the node's group PSes admit workers by its own allow-list; re-read it.
  const auto between_heartbeats = [&] {
    if (reload_requested == nullptr || !reload_requested->exchange(false)) return;
    if (!curve->zap) {
      GSGD_WARN("SIGHUP: CURVE is off; nothing to reload");
      return;
    }
    if (auto c =
            reloadAllowList(cfg, curve->zap.get(), curve->keys.public_key, curve->daemons.get());
        !c) {
      GSGD_ERROR("allow-list reload refused, keeping the running list: " << c.status().toString());
    }
  };
  while (true) {
    client::Assignment pooled;
    switch (serveHead(cfg, ctx, coord, curve->keys, stop_requested, between_heartbeats, &pooled,
                      shard.get())) {
      case HeadEnd::kStopped:
        return 0;
      case HeadEnd::kFailed:
        return 1;
      case HeadEnd::kHeadLost:
        break;  // serve the new head with fresh group PSes
      case HeadEnd::kPooled:
        if (shard) {
          GSGD_ERROR(
              "node_central_shard is for a single run's head, not a multi-job daemon's "
              "pool");
          return 1;
        }
        return servePool(cfg, ctx, coord, pooled, curve->keys, stop_requested, between_heartbeats);
    }
    log::setThreadTag("node");
  }
}

}  // namespace groupsgd::node
