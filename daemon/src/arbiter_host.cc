#include "groupsgd/daemon/arbiter_host.h"

#include "groupsgd/common/log.h"

namespace groupsgd::daemon {

ArbiterHost::ArbiterHost(std::unique_ptr<arbiter::ArbiterServer> server)
    : server_(std::move(server)), thread_([this] { server_->run(stop_); }) {}

ArbiterHost::~ArbiterHost() {
  stop_.store(true);
  thread_.join();
}

Result<std::unique_ptr<ArbiterHost>> startArbiter(zmq::context_t& ctx, const DaemonConfig& cfg,
                                                  const CurveKeys& keys) {
  if (cfg.arbiter_listen.empty()) return std::unique_ptr<ArbiterHost>();
  arbiter::ArbiterConfig acfg;
  acfg.listen = cfg.arbiter_listen;
  auto policy = arbiter::parsePolicy(cfg.arbiter_policy);
  if (!policy) return policy.status();
  acfg.policy = *policy;
  auto weights = arbiter::parseJobWeights(cfg.arbiter_weights);
  if (!weights) return weights.status();
  acfg.weights = std::move(*weights);
  acfg.lease_timeout_ms = cfg.arbiter_lease_timeout_ms;
  acfg.curve = keys;
  auto server = arbiter::ArbiterServer::create(ctx, acfg);
  if (!server) return Status(server.status().code(), "arbiter: " + server.status().toString());
  return std::make_unique<ArbiterHost>(std::move(*server));
}

}  // namespace groupsgd::daemon
