#include "groupsgd/jobs/job.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "groupsgd/common/central_shard_map.h"
#include "groupsgd/common/latest_text.h"
#include "groupsgd/common/log.h"
#include "groupsgd/coordinator/incarnation.h"
#include "groupsgd/daemon/group_server_setup.h"
#include "groupsgd/jobs/central_shards.h"
#include "groupsgd/kernels/model.h"

namespace groupsgd::jobs {

using coordinator::startIncarnation;

centralps::CentralConfig centralConfigFor(const DaemonConfig& cfg, const CurveKeys& keys) {
  centralps::CentralConfig c;
  c.model = cfg.model;
  c.seed = cfg.seed;
  c.staleness = cfg.staleness;
  c.outer = cfg.outer_optimizer;
  if (!cfg.outer_optimizer_decay_1d && !cfg.external_model) {
    c.outer_no_decay = kernels::oneDimParamRanges(cfg.model);
  }
  c.max_delta_norm = cfg.max_delta_norm;
  c.limits.job_id = cfg.job_id;
  c.curve = keys;
  c.checkpoint_dir = cfg.checkpoint_dir;
  c.checkpoint_keep = cfg.checkpoint_keep;
  c.checkpoint_every_versions = cfg.checkpoint_every_versions;
  c.checkpoint_interval_s = cfg.checkpoint_interval_s;
  c.keep_best = cfg.keep_best && !cfg.checkpoint_dir.empty();
  c.head_role = cfg.role;
  c.replication.listen = cfg.replication_listen;
  c.replication.sync = !cfg.standby_async;
  c.replication.loss_ms = cfg.standby_takeover_ms;
  c.replication.alone_ms = cfg.standby_alone_ms;
  c.replication.on_superseded = [](const std::string& why) {
    // Fenced: a newer head runs this job. Nothing more is committed or written here.
    GSGD_ERROR("superseded (" << why << "): exiting " << kSupersededExitCode);
    std::fflush(nullptr);
    std::_Exit(kSupersededExitCode);
  };
  return c;
}

Result<std::unique_ptr<Job>> Job::create(zmq::context_t& ctx, const DaemonConfig& cfg,
                                         const CurveKeys& keys,
                                         std::optional<ExternalIntake> intake,
                                         std::optional<std::uint32_t> local_groups,
                                         coordinator::CoordinatorDeps deps,
                                         std::optional<centralps::ReplicaState> replica) {
  std::unique_ptr<Job> job(new Job(cfg));
  centralps::CentralConfig ccfg = centralConfigFor(cfg, keys);
  if (intake && !intake->initial.empty()) ccfg.initial = std::move(intake->initial);
  std::vector<centralps::ShardRange> shard_ranges;
  if (cfg.central_shards > 1) {
    // This head serves shard 0; processes of role central-shard or node daemons the others
    // (docs/shards.md).
    auto ranges = centralShardRanges(cfg);
    if (!ranges) return Status(ranges.status().code(), "central PS: " + ranges.status().message());
    shard_ranges = std::move(*ranges);
    ccfg = narrowToShard(std::move(ccfg), cfg, shard_ranges, 0);
    // What this head's standby checks in the snapshot: the same cut of the same model.
    auto described = headShardDescription(cfg);
    if (!described) return described.status();
    ccfg.head_role = cfg.role + *described;
    // A consistent cut in checkpoint_dir: shard 0 resumes from it; once the others answer
    // they are brought back to it too (restoreShardsToCut). Not a promoted standby: its
    // replica is newer than any cut, and the other shards ran on with the old head.
    if (!replica) {
      auto resume = cutResumeFor(cfg, shard_ranges, 0, &job->resume_cut_);
      if (!resume) return resume.status();
      ccfg.cut_resume = std::move(*resume);
    }
  }
  const bool promoted = replica.has_value();
  std::uint64_t at_least = 0;
  if (replica) {
    // A promoted standby: its replica, and its old primary told to step down.
    at_least = replica->term + 1;
    ccfg.fence_endpoint = cfg.primary;
    deps.followed_state = std::move(replica->coordinator_state);
    deps.followed_state_age_ms = replica->coordinator_state_age_ms;
    ccfg.replica = std::move(replica);
    // Its own replication_listen (if any) takes a standby of this head; until one
    // attaches it commits alone, as a promoted head without one does.
    ccfg.replication.alone_until_attached = true;
  }
  if (!ccfg.replication.listen.empty()) {
    // The coordinator's state rides the central PS's standby link (coordinator_state.cc).
    deps.standby_state = std::make_shared<LatestText>();
    ccfg.replication.coordinator_state = deps.standby_state;
  }
  auto central = centralps::CentralServer::create(ctx, ccfg, "tcp://" + cfg.bind_host + ":*");
  if (!central)
    return Status(central.status().code(), "central PS: " + central.status().toString());
  job->central_ = std::move(*central);
  Topology topo;
  topo.central_endpoint = job->central_->endpoint();
  topo.param_count = job->central_->paramCount();
  if (!shard_ranges.empty()) {
    auto map = connectCentralShards(ctx, cfg, keys, shard_ranges, topo.central_endpoint);
    if (!map) return map.status();
    auto shards = parseCentralShards(*map, shard_ranges.back().end);
    if (!shards) return shards.status();
    std::vector<std::string> endpoints;
    for (const auto& s : *shards) endpoints.push_back(s.endpoint);
    if (ccfg.cut_resume) {
      GSGD_RETURN_IF_ERROR(restoreShardsToCut(
          ctx, cfg, keys, std::vector<std::string>(endpoints.begin() + 1, endpoints.end()),
          job->resume_cut_));
    }
    // A promoted standby takes cuts too, once every group exchanged with it: its shard 0
    // starts without exchange marks (docs/shards.md, "The head's standby"). Its numbers go
    // on above the old head's (a manifest in its own checkpoint_dir, the shards' newest).
    if (cfg.central_cut_interval_s > 0) {
      std::uint64_t last_cut = job->resume_cut_.number;
      if (promoted) {
        auto old = centralps::readShardCut(cfg.checkpoint_dir);
        if (old) last_cut = old->number;
      }
      job->cut_taker_ = std::make_unique<CentralCutTaker>(ctx, cfg, keys, std::move(endpoints),
                                                          shard_ranges, last_cut, promoted);
    }
    topo.central_map = std::move(*map);
    topo.param_count = shard_ranges.back().end;
  }
  if (intake) {
    topo.model_fingerprint = intake->fingerprint;
    topo.model_layout = intake->layout;
  }
  const std::uint32_t local = local_groups ? std::min(*local_groups, cfg.groupCount())
                                           : (cfg.role == "coordinator" ? 0 : cfg.groupCount());
  GSGD_RETURN_IF_ERROR(job->startGroups(ctx, keys, local, &topo));
  auto head = job->startHead(at_least);
  if (!head) return head.status();
  job->central_->setTerm(head->incarnation);
  deps.head = std::move(*head);
  if (intake) {
    job->coordinator_ = Coordinator::createOn(ctx, std::move(intake->socket), intake->endpoint, cfg,
                                              topo, keys, std::move(deps));
  } else {
    auto coordinator = Coordinator::create(ctx, cfg, topo, keys, std::move(deps));
    if (!coordinator) {
      return Status(coordinator.status().code(), "coordinator: " + coordinator.status().toString());
    }
    job->coordinator_ = std::move(*coordinator);
  }
  return job;
}

Job::~Job() { stopServers(); }

Status Job::startGroups(zmq::context_t& ctx, const CurveKeys& keys, std::uint32_t count,
                        Topology* topo) {
  for (std::uint32_t g = 0; g < count; ++g) {
    auto server = groupps::GroupServer::create(
        ctx,
        groupServerConfig(
            cfg_, g, topo->central_map.empty() ? topo->central_endpoint : topo->central_map, keys),
        topo->param_count, "tcp://" + cfg_.bind_host + ":*");
    if (!server) {
      return Status(server.status().code(),
                    "group PS " + std::to_string(g) + ": " + server.status().toString());
    }
    topo->group_endpoints.push_back((*server)->endpoint());
    groups_.push_back(std::move(*server));
  }
  return Status::ok();
}

// A restarted head: workers and nodes of the previous incarnation re-register on their
// own (their old epochs are refused); the summary reports what was lost.
Result<coordinator::HeadStart> Job::startHead(std::uint64_t at_least) {
  if (!central_->resumedFrom().empty()) {
    GSGD_INFO("resumed from checkpoint " << central_->resumedFrom() << " (central version "
                                         << central_->version() << ")");
  }
  auto head = startIncarnation(cfg_.checkpoint_dir, at_least);
  if (!head) return Status(head.status().code(), "head state: " + head.status().toString());
  head->resumed_from = central_->resumedFrom();
  head->resumed_version = central_->version();
  head->skipped_checkpoints = central_->skippedCheckpoints();
  if (at_least > 0) {
    head->took_over_from = at_least - 1;
    head->standby_sync = !cfg_.standby_async;
  }
  GSGD_INFO("head incarnation " << head->incarnation);
  return std::move(*head);
}

void Job::startServers() {
  if (!threads_.empty()) return;
  servers_stop_.store(false);
  threads_.emplace_back([this] { central_->run(servers_stop_); });
  if (cut_taker_) {
    cut_stop_.store(false);
    cut_thread_ = std::thread([this] { cut_taker_->run(cut_stop_); });
  }
  for (auto& g : groups_) threads_.emplace_back([this, gp = g.get()] { gp->run(servers_stop_); });
}

nlohmann::json Job::runCoordinator(const std::atomic<bool>& stop_requested) {
  return coordinator_->run(stop_requested);
}

void Job::stopServers() {
  // A cut under way finishes first, while every shard still answers.
  cut_stop_.store(true);
  if (cut_thread_.joinable()) cut_thread_.join();
  servers_stop_.store(true);  // the central PS writes its final checkpoint before it returns
  for (auto& t : threads_) t.join();
  threads_.clear();
}

}  // namespace groupsgd::jobs
