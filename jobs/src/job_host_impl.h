// The multi-job host behind runJobHost (groupsgd/jobs/job_host.h), its methods by purpose:
// job_host.cc the host loop and its operations (control socket, metrics, systemd, SIGHUP),
// job_host_launch.cc launching and reaping jobs, job_host_control.cc the job.* control
// methods, job_host_slots.cc the group PS slots (here and on node daemons).
// Thread rule: a JobHost is made and used on the main thread (the host loop); the one
// exception is createAwaitedJob, run on that job's runner thread, which touches only its
// HostedJob and what is fixed once the host runs (ctx_, cfg_, keys_, zap_, &metrics_).
// A HostedJob is shared by the two threads: the atomics both ways; job, error and summary
// the runner writes before done, and the host reads them only after it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/status.h"
#include "groupsgd/common/zap_handler.h"
#include "groupsgd/jobs/job.h"
#include "groupsgd/jobs/job_host.h"
#include "groupsgd/jobs/job_table.h"
#include "groupsgd/jobs/node_pool.h"
#include "groupsgd/jobs/serve_standby.h"
#include "groupsgd/ops/control_server.h"
#include "groupsgd/ops/metrics.h"
#include "groupsgd/ops/metrics_server.h"
#include "job_control_queue.h"
#include "job_front.h"
#include "table_replication.h"

namespace groupsgd::jobs {

// Now as Unix seconds, for the job table's times.
std::int64_t unixNow();

// A job the daemon hosts now: its Job runs on `runner` until it ends, then the host
// joins it and records the summary.
struct HostedJob {
  DaemonConfig cfg;
  // Null while a model-external job waits for its first worker's model: the runner
  // creates it then (the host thread reads it only after `done`).
  std::unique_ptr<Job> job;
  std::optional<zmq::socket_t> intake;  // that wait's socket (the job's coordinator's)
  std::atomic<bool> awaiting_model{false};
  std::string error;  // set by the runner when the job could not start (state failed)
  std::string endpoint;
  std::uint32_t slots = 0;  // its group PSes: local_slots here, the rest on node daemons
  std::uint32_t local_slots = 0;
  std::string group_settings;         // handed to the node daemons serving it (groupSettingsJson)
  std::atomic<bool> stop{false};      // end the job (a stop condition of the operator)
  std::atomic<bool> stop_now{false};  // ... without waiting for trainers (stop without --drain)
  std::atomic<bool> suspend{false};   // the daemon stops: keep the job for the next start
  std::atomic<bool> done{false};
  bool stopped_by_operator = false;
  JobControlQueue control;
  nlohmann::json summary;  // written by the runner before done
  std::thread runner;
};

class JobHost {
 public:
  JobHost(zmq::context_t& ctx, const DaemonConfig& cfg, const CurveKeys& keys,
          const ZapHandler* zap, AllowList* daemons, JobTable table, JobFront front,
          ArbiterHost* arbiter)
      : ctx_(ctx),
        cfg_(cfg),
        keys_(keys),
        zap_(zap),
        daemons_(daemons),
        table_(std::move(table)),
        front_(std::move(front)),
        arbiter_(arbiter) {
    front_.attachPool(&pool_, cfg_.heartbeat_ms);
  }

  Status startOperations();
  // replication_listen: the job table's standby link (term: this daemon's incarnation).
  // A promoted standby: its fence against the old primary (term: the primary's + 1).
  Status startReplication(std::optional<ServeTakeover> takeover, std::uint64_t term);
  void resumeJobs();
  void run(const std::atomic<bool>& stop, std::atomic<bool>* reload);

 private:
  using Clock = std::chrono::steady_clock;

  std::string jobDir(const std::string& name) const { return cfg_.state_dir + "/jobs/" + name; }
  // Group PS slots in use: here (of max_group_slots), and all (with the node daemons').
  std::uint32_t localSlotsInUse() const;
  std::uint32_t slotsInUse() const { return localSlotsInUse() + pool_.inUse(); }
  std::uint32_t localSlotsFree() const {
    return cfg_.max_group_slots - std::min(cfg_.max_group_slots, localSlotsInUse());
  }
  // Places the node slots a running job lacks (a resumed job before the nodes were back,
  // a node lost mid-job) on the nodes' free slots; drops nodes gone silent.
  void tendNodes();
  // Why a job of this many group PSes cannot have them now (job.submit's refusal), or none.
  std::optional<std::string> slotsLacking(std::uint32_t groups) const;
  nlohmann::ordered_json groupSlotsJson() const;
  // The device arbiter's devices and per-job lease waits (null without arbiter_listen).
  nlohmann::ordered_json arbiterJson() const;
  std::vector<FrontJob> frontJobs() const;
  Result<DaemonConfig> jobConfig(const JobRecord& rec) const;
  // Binds and starts the job of this record; on failure the record is marked failed.
  // from: a promoted standby's replica of it (no checkpoint read; the old primary fenced).
  Status launch(JobRecord& rec, const FollowedJob* from = nullptr);
  // The standby link's table message: the table, the role, each running job's link.
  std::string tableMessage() const;
  // Model external: binds the job's coordinator socket; with the model saved at an
  // earlier start the job is created at once, else its runner waits for a worker's.
  Status launchExternal(HostedJob& h);
  // The runner's side of that wait: the model, saved beside the checkpoints, then the Job.
  void createAwaitedJob(HostedJob& h);
  // What a job's coordinator borrows from the host (control queue, metrics, flags).
  coordinator::CoordinatorDeps depsFor(HostedJob& h);
  void reapEnded();
  void saveTable();
  void serveControl();
  void handleControl(ops::PendingRequest&& r);
  // The name of a running job.
  Result<std::string> targetJob(const ops::PendingRequest& r) const;
  nlohmann::ordered_json jobRow(const JobRecord& rec) const;
  void jobSubmit(ops::PendingRequest& r);
  // With a standby attached: r answered with row once the standby acknowledged the table
  // holding the change (or standby_takeover_ms passed: standby_acknowledged false).
  void answerOnceReplicated(ops::PendingRequest& r, nlohmann::ordered_json row);
  // The awaiting answers now due (all: every one, as they stand).
  void answerReplicated(bool all);
  void jobStop(ops::PendingRequest& r);
  void jobStatus(ops::PendingRequest& r);
  void jobList(ops::PendingRequest& r);
  // The job list and group slots for the dashboard page, once a second.
  void publishDashboard();
  void jobSummary(ops::PendingRequest& r);
  void suspendAll();
  void reloadOnHangup();

  zmq::context_t& ctx_;
  const DaemonConfig& cfg_;
  const CurveKeys& keys_;
  const ZapHandler* zap_;
  // keys_.daemons, writable: a reload gives node keys their rights (or takes them).
  AllowList* daemons_;
  JobTable table_;
  JobFront front_;
  ArbiterHost* arbiter_;  // null without arbiter_listen
  NodePool pool_;         // node daemons registered at the front, and their slots
  std::map<std::string, std::unique_ptr<HostedJob>> running_;
  ops::MetricsRegistry metrics_;
  ops::DashboardBoard dashboard_{/*serve=*/true};  // the page at / of the metrics endpoint
  Clock::time_point next_dashboard_ = Clock::now();
  std::unique_ptr<ops::ControlServer> control_;
  std::unique_ptr<ops::MetricsServer> metrics_server_;
  bool shutdown_requested_ = false;
  std::unique_ptr<TableLink> table_link_;  // replication_listen: the standby's table
  std::unique_ptr<TableFence> fence_;      // a promoted standby: the old primary's
  bool table_changed_ = false;
  struct AwaitingStandby {
    ops::PendingRequest request;
    nlohmann::ordered_json row;
    std::uint64_t revision;  // the table revision holding the change
    Clock::time_point deadline;
  };
  std::vector<AwaitingStandby> awaiting_standby_;
  std::optional<ServeTakeover> takeover_;  // a promoted standby, until resumeJobs
  std::optional<std::chrono::microseconds> watchdog_;
  Clock::time_point next_watchdog_ = Clock::now();
};

}  // namespace groupsgd::jobs
