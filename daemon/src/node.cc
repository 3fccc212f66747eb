#include "groupsgd/daemon/node.h"

#include <thread>

#include "groupsgd/common/compression_spec.h"
#include "groupsgd/common/log.h"
#include "groupsgd/daemon/curve_setup.h"
#include "groupsgd/groupps/group_server.h"
#include "groupsgd/worker/client.h"

namespace groupsgd::daemon {
namespace {

// Registration with back-off until the coordinator answers (it may start after us).
Result<worker::Assignment> registerNode(worker::CoordinatorClient& coord, worker::Role role,
                                        const std::vector<std::string>& endpoints,
                                        const std::atomic<bool>& stop) {
  auto backoff = std::chrono::milliseconds(200);
  while (!stop.load()) {
    auto a = coord.registerAs(role, "node", 0, endpoints);
    if (a || a.status().code() != Code::kUnavailable) return a;
    GSGD_WARN("coordinator not reachable (" << a.status().message() << "); retrying");
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
  return unavailable("stopped before registering");
}

}  // namespace

int runNode(const DaemonConfig& cfg, const std::atomic<bool>& stop_requested) {
  log::setThreadTag("node");
  zmq::context_t ctx(2);
  // The node serves group PSes with the cluster's daemon key pair: ZAP before any bind.
  auto curve = startCurve(ctx, cfg);
  if (!curve) {
    GSGD_ERROR("CURVE: " << curve.status().toString());
    return 1;
  }
  worker::CoordinatorClient coord(ctx, cfg.coordinator, cfg.job_id,
                                  std::chrono::milliseconds(5000), curve->keys);
  // 1. Where is the central PS, and how big is the model? (asked as a tool, then left)
  auto probe = registerNode(coord, worker::Role::kTool, {}, stop_requested);
  if (!probe) {
    GSGD_ERROR("cannot reach the coordinator at " << cfg.coordinator << ": " << probe.status().toString());
    return 1;
  }
  (void)coord.leave(*probe, 0, 0);
  // 2. Bind the group PSes. Their optimizer settings come from this node's configuration:
  //    give every daemon the same configuration file.
  MessageLimits limits;
  limits.job_id = cfg.job_id;
  std::vector<std::unique_ptr<groupps::GroupServer>> groups;
  std::vector<std::string> endpoints;
  for (std::uint32_t g = 0; g < cfg.node_groups; ++g) {
    groupps::GroupServerConfig gcfg;
    gcfg.group_id = g;  // renumbered by the coordinator's GroupConfig below
    gcfg.central_endpoint = probe->central_endpoint;
    gcfg.optimizer = cfg.optimizer;
    gcfg.exchange_period = cfg.exchangePeriod();
    gcfg.step_deadline_ms = cfg.step_deadline_ms;
    gcfg.max_grad_norm = cfg.max_grad_norm;
    gcfg.delta_compression = *parseCompressionSpec(cfg.compress_deltas);
    gcfg.limits = limits;
    gcfg.adopt_group_id = true;
    gcfg.curve = curve->keys;
    auto server = groupps::GroupServer::create(ctx, gcfg, probe->param_count,
                                               "tcp://" + cfg.bind_host + ":*");
    if (!server) {
      GSGD_ERROR("group PS: " << server.status().toString());
      return 1;
    }
    endpoints.push_back((*server)->endpoint());
    groups.push_back(std::move(*server));
  }
  std::atomic<bool> servers_stop{false};
  std::vector<std::thread> threads;
  for (auto& g : groups) threads.emplace_back([&g, &servers_stop] { g->run(servers_stop); });
  // 3. Offer them, then stay alive until told to stop.
  auto me = registerNode(coord, worker::Role::kNode, endpoints, stop_requested);
  int rc = 0;
  if (!me) {
    GSGD_ERROR("node registration failed: " << me.status().toString());
    rc = 1;
  } else {
    GSGD_INFO("node " << me->worker_id << " offers " << endpoints.size() << " group PS(es)");
    int failures = 0;
    while (!stop_requested.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(me->heartbeat_ms));
      auto hb = coord.heartbeat(*me, {});
      if (hb && hb->stop) {
        GSGD_INFO("the coordinator ends the run");
        break;
      }
      if (!hb && ++failures % 10 == 0) {
        GSGD_WARN("coordinator silent for " << failures << " heartbeats; group PSes keep serving");
      }
      if (hb) failures = 0;
    }
    (void)coord.leave(*me, 0, 0);
  }
  servers_stop.store(true);
  for (auto& t : threads) t.join();
  return rc;
}

}  // namespace groupsgd::daemon
