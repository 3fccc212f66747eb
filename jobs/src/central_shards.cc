#include "groupsgd/jobs/central_shards.h"

#include <chrono>
#include <memory>
#include <thread>

#include "groupsgd/client/client.h"
#include "groupsgd/common/atomic_file.h"
#include "groupsgd/common/central_shard_map.h"
#include "groupsgd/common/log.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/jobs/central_cut.h"
#include "groupsgd/jobs/job.h"
#include "groupsgd/kernels/model.h"

namespace groupsgd::jobs {

Result<std::vector<centralps::ShardRange>> centralShardRanges(const daemon::DaemonConfig& cfg) {
  const auto sizes = centralps::modelTensorSizes(cfg.model);
  if (cfg.central_shard_split == "even") {
    std::size_t total = 0;
    for (std::size_t n : sizes) total += n;
    return centralps::planEvenShards(total, cfg.central_shards);
  }
  return centralps::planShards(sizes, cfg.central_shards);
}

centralps::CentralConfig narrowToShard(centralps::CentralConfig c, const daemon::DaemonConfig& cfg,
                                       const std::vector<centralps::ShardRange>& ranges,
                                       std::size_t index) {
  const centralps::ShardRange r = ranges.at(index);
  auto model = kernels::makeModel(cfg.model);
  std::vector<float> whole(model->paramCount());
  model->init(whole, cfg.seed);
  c.initial.assign(whole.begin() + static_cast<std::ptrdiff_t>(r.begin),
                   whole.begin() + static_cast<std::ptrdiff_t>(r.end));
  c.outer_no_decay = centralps::rangesWithin(c.outer_no_decay, r);
  if (index > 0 && !c.checkpoint_dir.empty()) {
    c.checkpoint_dir += "/shard-" + std::to_string(index);
  }
  c.keep_best = false;
  return c;
}

namespace {

std::vector<std::string> splitEndpoints(const std::string& list) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const auto comma = list.find(',', at);
    out.push_back(list.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace

Result<std::string> connectCentralShards(zmq::context_t& ctx, const daemon::DaemonConfig& cfg,
                                         const CurveKeys& keys,
                                         const std::vector<centralps::ShardRange>& ranges,
                                         const std::string& shard0_endpoint) {
  const auto endpoints = splitEndpoints(cfg.central_shard_endpoints);
  if (endpoints.size() + 1 != ranges.size()) {
    return invalidArgument("central_shards " + std::to_string(ranges.size()) + " needs " +
                           std::to_string(ranges.size() - 1) + " central_shard_endpoints");
  }
  std::vector<CentralShard> shards{{shard0_endpoint, ranges[0].begin, ranges[0].end}};
  MessageLimits limits;
  limits.job_id = cfg.job_id;
  const auto give_up = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<std::int64_t>(cfg.give_up_s * 1000));
  for (std::size_t k = 1; k < ranges.size(); ++k) {
    const std::string& ep = endpoints[k - 1];
    if (ep.empty()) return invalidArgument("central shard " + std::to_string(k) + ": no endpoint");
    // A failover list (PRIMARY|STANDBY): asked in turn; a standby answers once promoted.
    std::vector<std::unique_ptr<RpcClient>> rpcs;
    for (const auto& alternative : CentralShard::splitFailoverList(ep)) {
      if (alternative.empty()) {
        return invalidArgument("central shard " + std::to_string(k) + ": an empty endpoint in '" +
                               ep + "'");
      }
      rpcs.push_back(
          std::make_unique<RpcClient>(ctx, alternative, limits, clientSocketOptions(keys)));
    }
    std::vector<float> slice(ranges[k].end - ranges[k].begin);
    Status last = unavailable("not asked");
    for (std::size_t attempt = 0;; ++attempt) {
      auto version = client::fetchCentralModel(*rpcs[attempt % rpcs.size()], cfg.job_id, slice,
                                               std::chrono::milliseconds(1000));
      last = version ? Status::ok() : version.status();
      // A size mismatch is final: that process serves another model or cut.
      if (last.isOk() || last.code() == Code::kInvalidArgument) break;
      if (std::chrono::steady_clock::now() >= give_up) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (last.code() == Code::kInvalidArgument) {
      return invalidArgument("central shard " + std::to_string(k) + " at " + ep +
                             " does not serve range " + std::to_string(ranges[k].begin) + "-" +
                             std::to_string(ranges[k].end) +
                             " (same model, seed and central_shards there?): " + last.toString());
    }
    if (!last.isOk()) {
      return unavailable("central shard " + std::to_string(k) + " at " + ep +
                         " did not answer within give_up_s (" + std::to_string(cfg.give_up_s) +
                         " s): " + last.toString());
    }
    GSGD_INFO("central shard " << k << " at " << ep << " serves " << ranges[k].begin << "-"
                               << ranges[k].end);
    shards.push_back({ep, ranges[k].begin, ranges[k].end});
  }
  return formatCentralShards(shards);
}

Result<std::string> headShardDescription(const daemon::DaemonConfig& cfg) {
  if (cfg.central_shards <= 1) return std::string();
  auto ranges = centralShardRanges(cfg);
  if (!ranges) return ranges.status();
  return " with central shard 0 of " + std::to_string(cfg.central_shards) + ", parameters " +
         std::to_string((*ranges)[0].begin) + "-" + std::to_string((*ranges)[0].end) + " of " +
         kernels::modelKindName(cfg.model) + ", seed " + std::to_string(cfg.seed);
}

Result<centralps::CentralConfig> headCentralConfigFor(const daemon::DaemonConfig& cfg,
                                                      const CurveKeys& keys) {
  centralps::CentralConfig c = centralConfigFor(cfg, keys);
  if (cfg.central_shards <= 1) return c;
  auto ranges = centralShardRanges(cfg);
  if (!ranges) return ranges.status();
  return narrowToShard(std::move(c), cfg, *ranges, 0);
}

Result<CentralShardSetup> centralShardSetup(const daemon::DaemonConfig& cfg, const CurveKeys& keys,
                                            std::size_t index) {
  auto ranges = centralShardRanges(cfg);
  if (!ranges) return ranges.status();
  CentralShardSetup setup{narrowToShard(centralConfigFor(cfg, keys), cfg, *ranges, index), ""};
  setup.role = "central-shard " + std::to_string(index) + " of " +
               std::to_string(cfg.central_shards) + ", parameters " +
               std::to_string((*ranges)[index].begin) + "-" + std::to_string((*ranges)[index].end) +
               " of " + kernels::modelKindName(cfg.model) + ", seed " + std::to_string(cfg.seed);
  setup.central.head_role = setup.role;
  auto resume = cutResumeFor(cfg, *ranges, index);  // the head's manifest, when it is here
  if (!resume) return resume.status();
  setup.central.cut_resume = std::move(*resume);
  return setup;
}

Result<std::unique_ptr<centralps::CentralServer>> startCentralShard(
    zmq::context_t& ctx, const daemon::DaemonConfig& cfg, CentralShardSetup shard,
    const std::string& listen, std::optional<centralps::ReplicaState> replica) {
  centralps::CentralConfig c = std::move(shard.central);
  // The term of this shard's replication stream: the start time in seconds (it grows
  // across restarts, as a head's without a checkpoint directory); a promoted standby's is
  // its primary's + 1, so the old primary, back, is fenced.
  std::uint64_t term =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  if (replica) {
    term = replica->term + 1;
    // Its own replication_listen (if any) takes a standby of the promoted shard, which
    // commits alone until one attaches (docs/shards.md, "Shard standbys").
    c.replication.alone_until_attached = true;
    c.fence_endpoint = cfg.primary;
    c.replica = std::move(replica);
    c.cut_resume.reset();  // the replica is newer than any cut
  }
  auto server = centralps::CentralServer::create(ctx, std::move(c), listen);
  if (!server)
    return Status(server.status().code(), "central shard: " + server.status().toString());
  (*server)->setTerm(term);
  GSGD_INFO(shard.role << " on " << (*server)->endpoint() << ", term " << term
                       << (cfg.replication_listen.empty()
                               ? std::string()
                               : ", its standby at " + cfg.replication_listen)
                       << ((*server)->resumedFrom().empty()
                               ? std::string()
                               : ", resumed from " + (*server)->resumedFrom()));
  return std::move(*server);
}

Status serveCentralShard(zmq::context_t& ctx, const daemon::DaemonConfig& cfg,
                         CentralShardSetup shard, const std::atomic<bool>& stop,
                         std::optional<centralps::ReplicaState> replica) {
  auto server = startCentralShard(ctx, cfg, std::move(shard), cfg.listen, std::move(replica));
  if (!server) return server.status();
  if (!cfg.endpoint_file.empty()) {
    GSGD_RETURN_IF_ERROR(writeFileAtomically(cfg.endpoint_file, (*server)->endpoint() + "\n"));
  }
  (*server)->run(stop);
  return Status::ok();
}

}  // namespace groupsgd::jobs
