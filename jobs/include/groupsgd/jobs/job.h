// One training job: a central PS, its group PSes and a coordinator with its summary,
// which is what one groupsgdd run is. groupsgdd's single run is one Job on the main
// thread; a daemon started with --serve hosts many (job_host.h).
// Thread rule: create() and every method on one owning thread. The central PS and the
// group PSes run on threads the job owns (startServers .. stopServers); runCoordinator()
// runs the coordinator on the calling thread.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "groupsgd/centralps/central_server.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/coordinator/coordinator.h"
#include "groupsgd/daemon/config.h"
#include "groupsgd/groupps/group_server.h"
#include "groupsgd/jobs/central_cut.h"

namespace groupsgd::jobs {

// The daemon configuration this room is built from (daemon/).
using coordinator::Coordinator;
using coordinator::Topology;
using daemon::DaemonConfig;

// Model external: the coordinator's socket, already bound and published, and the model
// the first worker (or external_model_file) brought. A head that gathered its central
// shards from node daemons (node_shard_intake.h) hands over the socket only (no model).
struct ExternalIntake {
  zmq::socket_t socket;
  std::string endpoint;
  std::string fingerprint;
  std::vector<float> initial;
  std::string layout;  // the fingerprint's text, when the worker stated it ("" = none)
};

// The central PS's configuration from the daemon's (a standby builds its replica from it).
centralps::CentralConfig centralConfigFor(const DaemonConfig& cfg, const CurveKeys& keys);
// A head superseded by its promoted standby exits with this code at once.
inline constexpr int kSupersededExitCode = 75;

class Job {
 public:
  // Binds the central PS (resuming from cfg.checkpoint_dir's newest checkpoint), the
  // group PSes (none for role coordinator: nodes offer them) and the coordinator (on the
  // intake's socket, else at cfg.listen), and records the head incarnation. Nothing runs
  // yet. Errors name the part that failed. local_groups (a multi-job daemon): how many
  // of the job's group PSes run here; node daemons offer the rest to its coordinator.
  // deps: what the coordinator borrows from the process (its head start is filled here).
  // replica: a promoted standby's state (the central PS starts from it, not a checkpoint;
  // the incarnation is above the primary's, and the old primary is told to step down).
  static Result<std::unique_ptr<Job>> create(
      zmq::context_t& ctx, const DaemonConfig& cfg, const CurveKeys& keys,
      std::optional<ExternalIntake> intake = std::nullopt,
      std::optional<std::uint32_t> local_groups = std::nullopt,
      coordinator::CoordinatorDeps deps = {},
      std::optional<centralps::ReplicaState> replica = std::nullopt);
  ~Job();  // stops the servers if they still run
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const DaemonConfig& config() const { return cfg_; }
  Coordinator& coordinator() { return *coordinator_; }
  const std::string& endpoint() const { return coordinator_->endpoint(); }
  const std::string& resumedFrom() const { return central_->resumedFrom(); }
  // Its central PS's standby link ("" without replication_listen).
  std::string replicationEndpoint() const { return central_->replicationEndpoint(); }

  // Starts the central PS thread and one thread per group PS.
  void startServers();
  // Runs the coordinator until the job ends; returns its summary.
  nlohmann::json runCoordinator(const std::atomic<bool>& stop_requested);
  // Stops the server threads (the central PS writes its final checkpoint first) and joins them.
  void stopServers();

 private:
  Job(DaemonConfig cfg) : cfg_(std::move(cfg)) {}
  Status startGroups(zmq::context_t& ctx, const CurveKeys& keys, std::uint32_t count,
                     Topology* topo);
  // The head incarnation and what the central PS resumed from.
  Result<coordinator::HeadStart> startHead(std::uint64_t at_least);

  DaemonConfig cfg_;
  std::unique_ptr<centralps::CentralServer> central_;
  // central_shards > 1: the cut resumed from (number 0: none) and the cuts' taker.
  centralps::ShardCut resume_cut_;
  std::unique_ptr<CentralCutTaker> cut_taker_;
  std::atomic<bool> cut_stop_{false};
  std::thread cut_thread_;
  std::vector<std::unique_ptr<groupps::GroupServer>> groups_;
  std::unique_ptr<Coordinator> coordinator_;
  std::atomic<bool> servers_stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace groupsgd::jobs
