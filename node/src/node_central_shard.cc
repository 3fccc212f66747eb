#include "node_central_shard.h"

#include "groupsgd/common/central_shard_map.h"
#include "groupsgd/common/log.h"
#include "groupsgd/jobs/central_shards.h"
#include "groupsgd/kernels/model.h"

namespace groupsgd::node {

Result<std::unique_ptr<NodeCentralShard>> NodeCentralShard::start(zmq::context_t& ctx,
                                                                  const daemon::DaemonConfig& cfg,
                                                                  const CurveKeys& keys) {
  const std::size_t k = cfg.node_central_shard;
  auto ranges = jobs::centralShardRanges(cfg);
  if (!ranges) return Status(ranges.status().code(), "central shard: " + ranges.status().message());
  auto setup = jobs::centralShardSetup(cfg, keys, k);
  if (!setup) return Status(setup.status().code(), "central shard: " + setup.status().message());
  // With replication_listen its standby follows it there (the same stream as a role
  // central-shard process's); a superseded shard takes its node down (exit 75).
  auto server =
      jobs::startCentralShard(ctx, cfg, std::move(*setup), "tcp://" + cfg.bind_host + ":*");
  if (!server) return server.status();
  std::unique_ptr<NodeCentralShard> s(new NodeCentralShard);
  s->server_ = std::move(*server);
  s->offer_.index = static_cast<std::uint32_t>(k);
  s->offer_.count = cfg.central_shards;
  s->offer_.begin = (*ranges)[k].begin;
  s->offer_.end = (*ranges)[k].end;
  // With a standby the head's map names the shard by its failover list: groups and
  // evaluators move to the standby when this node falls silent.
  s->offer_.endpoint = s->server_->endpoint() + (cfg.node_central_shard_standby.empty()
                                                     ? std::string()
                                                     : "|" + cfg.node_central_shard_standby);
  s->offer_.model = kernels::modelKindName(cfg.model);
  s->offer_.seed = cfg.seed;
  s->thread_ = std::thread([server = s->server_.get(), stop = &s->stop_] {
    log::setThreadTag("shard");
    server->run(*stop);
  });
  return s;
}

NodeCentralShard::~NodeCentralShard() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

Status NodeCentralShard::checkInMap(const std::string& central_endpoint,
                                    std::uint64_t param_count) const {
  const std::string mine =
      "central shard " + std::to_string(offer_.index) + " at " + offer_.endpoint;
  if (!isCentralShardMap(central_endpoint)) {
    return failedPrecondition("this node serves " + mine + ", but the run has one central PS at " +
                              central_endpoint +
                              " (its head runs central_shards 1, or lists its shards in "
                              "central_shard_endpoints)");
  }
  auto map = parseCentralShards(central_endpoint, param_count);
  if (!map) return map.status();
  if (offer_.index >= map->size() || (*map)[offer_.index].endpoint != offer_.endpoint ||
      (*map)[offer_.index].begin != offer_.begin || (*map)[offer_.index].end != offer_.end) {
    const std::string theirs =
        offer_.index < map->size() ? (*map)[offer_.index].endpoint : std::string("nowhere");
    return failedPrecondition("this node serves " + mine + ", but the run's shard " +
                              std::to_string(offer_.index) + " is at " + theirs +
                              " (another node hosts it, or the run's cut differs)");
  }
  return Status::ok();
}

}  // namespace groupsgd::node
