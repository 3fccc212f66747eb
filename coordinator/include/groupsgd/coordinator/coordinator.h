// The coordinator: registers workers, assigns them to groups (through a replaceable
// AssignmentPolicy), configures the group PSes, tracks liveness from heartbeats, prints
// progress, decides when training stops, and at the end drains workers, flushes every
// group into the central PS and produces the run summary.
// Thread rule: create() on any thread, run() on one thread that owns every socket.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>
#include <zmq.hpp>

#include <nlohmann/json.hpp>

#include "groupsgd/adaptive/adaptive_controller.h"
#include "groupsgd/adaptive/registry.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/common/zap_handler.h"
#include "groupsgd/daemon/config.h"
#include "groupsgd/coordinator/evaluator_watch.h"
#include "groupsgd/coordinator/group_config_queue.h"
#include "groupsgd/coordinator/group_fleet.h"
#include "groupsgd/coordinator/head_start.h"
#include "groupsgd/coordinator/pending_calls.h"
#include "groupsgd/coordinator/metrics_exporter.h"
#include "groupsgd/coordinator/node_spares.h"
#include "groupsgd/coordinator/run_summary.h"
#include "groupsgd/coordinator/topology.h"
#include "groupsgd/ops/control_server.h"
#include "groupsgd/ops/metrics.h"

namespace groupsgd::coordinator {

// The daemon configuration this room is built from (daemon/).
using daemon::DaemonConfig;
using daemon::Mode;

// Names this room takes from the adaptive and ops libraries.
using adaptive::AdaptiveController;
using adaptive::AssignmentPolicy;
using adaptive::ControlActions;
using adaptive::Registry;
using adaptive::LeastLoadedPolicy;
using adaptive::WorkerRecord;
using adaptive::WorkerRole;
using adaptive::WorkerState;
namespace policy = adaptive::policy;
using ops::ControlError;
using ops::ControlQueue;
using ops::MetricLabels;
using ops::MetricsRegistry;
using ops::PendingRequest;

class Coordinator {
 public:
  // curve: the daemon's keys (empty = plain links); its ZAP handler must already run.
  static Result<std::unique_ptr<Coordinator>> create(zmq::context_t& ctx, DaemonConfig cfg,
                                                     Topology topo, CurveKeys curve = {});
  // The same on a socket already bound to cfg.listen (the external-model intake's).
  static std::unique_ptr<Coordinator> createOn(zmq::context_t& ctx, zmq::socket_t sock,
                                               std::string endpoint, DaemonConfig cfg,
                                               Topology topo, CurveKeys curve);
  const std::string& endpoint() const { return endpoint_; }
  // Serves until training ends (a stop condition or stop_requested), then drains and
  // flushes. Returns the run summary (docs/config.md lists its fields).
  nlohmann::json run(const std::atomic<bool>& stop_requested);

  // The control methods the coordinator answers (docs/operations.md, "Methods").
  static std::vector<std::string> controlMethodNames();

  // Operator actions (the control socket calls these on the coordinator thread).
  // Drain: the worker's next gradient is included, then it is told to leave.
  // done (optional) hears whether its group PS took the change.
  Status drain(std::uint64_t worker_id, std::function<void(const Status&)> done = {});

  // Operations plumbing, all optional, set before run(): the control socket's request
  // queue, the metrics registry to update, the systemd watchdog period, and a flag that
  // SIGHUP sets to reload the configuration file.
  void attachControl(ControlQueue* control) { control_ = control; }
  // Every series the coordinator exports carries job="<job_name>".
  void attachMetrics(MetricsRegistry* metrics) {
    job_metrics_ = std::make_unique<MetricsRegistry>(metrics, MetricLabels{{"job", cfg_.job_name}});
    metrics_ = job_metrics_.get();
    exporter_ = std::make_unique<MetricsExporter>(metrics_);
    evaluators_.attachMetrics(metrics_);
  }
  void setWatchdog(std::optional<std::chrono::microseconds> period) { watchdog_ = period; }
  void setReloadFlag(std::atomic<bool>* reload) { reload_ = reload; }
  // Set before run(): the incarnation and what was resumed (default: a fresh first head).
  void setHeadStart(HeadStart start);
  // The ZAP handler whose counters status and /metrics report (borrowed; outlives run()).
  void attachZap(const ZapHandler* zap) { zap_ = zap; }
  // Re-reads the CURVE allow-list (SIGHUP and the reload_keys method); unset: CURVE off.
  using KeyReloader = std::function<Result<AllowListChange>()>;
  void setKeyReloader(KeyReloader reload) { reload_keys_ = std::move(reload); }
  // A job of a multi-job daemon (docs/jobs.md), set before run(); both flags borrowed.
  // stop_now: once set, a stop does not wait for trainers to leave. suspend: run()
  // returns {"suspended": true} at once, without draining or flushing (the daemon is
  // stopping; the job resumes from its checkpoint when it starts again).
  void setJobFlags(const std::atomic<bool>* stop_now, const std::atomic<bool>* suspend) {
    stop_now_ = stop_now;
    suspend_ = suspend;
  }

 private:
  using Clock = std::chrono::steady_clock;
  Coordinator(zmq::context_t& ctx, zmq::socket_t sock, std::string endpoint, DaemonConfig cfg,
              Topology topo, CurveKeys curve);

  void serveOnce(std::chrono::milliseconds timeout);
  void handle(const zmq::message_t& from, std::vector<zmq::message_t>&& frames);
  // key: the sender's authenticated CURVE key ("" on plain links).
  void onRegister(const zmq::message_t& from, const InMessage& msg, const std::string& key);
  // onRegister's steps: who may not register at all (ok: may), a worker that registers
  // again under its id (moved by a regroup), and a new one.
  Status admissionCheck(proto::Register::Reader r, const std::string& key);
  void onReturningWorker(const zmq::message_t& from, const InMessage& msg, const std::string& key);
  void onNewWorker(const zmq::message_t& from, const InMessage& msg, const std::string& key);
  void onHeartbeat(const zmq::message_t& from, const InMessage& msg, const std::string& key);
  void onLeave(const zmq::message_t& from, const InMessage& msg, const std::string& key);
  // Under CURVE a worker id belongs to the key that registered it; refuses and counts
  // a request under that id from another key.
  bool ownsId(const zmq::message_t& from, const WorkerRecord& w, const std::string& key);
  nlohmann::ordered_json curveJson() const;
  void refuse(const zmq::message_t& from, const Status& why);
  // Queues group's configuration (group_config_queue.h: sent off this loop, coalesced).
  // done hears the outcome (default: a failure is logged); after: see request().
  void configureGroup(std::uint32_t group, bool flush = false, GroupConfigQueue::Done done = {},
                      const std::vector<std::uint32_t>& after = {});
  // The configuration as the registry says now (the queue builds it when it sends).
  Result<OutMessage> groupConfigMessage(std::uint32_t group, bool flush) const;
  // A registered trainer's reply (to: its routing id), once `group` (where it was placed)
  // expects it, or refused if it cannot.
  void admitTrainer(const std::shared_ptr<zmq::message_t>& to, std::uint64_t id,
                    std::uint32_t group, const Status& configured);
  // Group PS slots exist (role coordinator: offered by node daemons as they register).
  bool slotsReady() const { return fleet_->allReady(); }
  void onNodeRegister(const zmq::message_t& from, const InMessage& msg, WorkerRecord& rec);
  void sendAssignment(const zmq::message_t& to, const WorkerRecord& rec);
  void controlWindow();
  // A trainer's heartbeat, before its step count is updated: adds its step times to its
  // totals and, in adaptive mode, feeds the controller its steps one by one (or the
  // heartbeat's means); an early heartbeat (a speed change) brings the next window forward
  // (coordinator_adaptive.cc).
  void observeSteps(WorkerRecord& w, const InMessage& msg);
  void applyRegroup(const ControlActions& act);
  void event(const std::string& kind, const std::string& text, double predicted_gain = 0);
  // Control socket (coordinator_control.cc).
  void serveControl();
  void handleControl(PendingRequest&& r);
  nlohmann::ordered_json statusJson() const;
  nlohmann::ordered_json workersJson() const;
  nlohmann::ordered_json groupsJson() const;
  Result<std::uint64_t> findWorker(const nlohmann::json& ref) const;
  Status applySettings(const nlohmann::json& values, nlohmann::ordered_json* applied,
                       nlohmann::ordered_json* previous);
  // One handler per control method; checkpoint answers later, when the central PS has.
  static const std::map<std::string, void (Coordinator::*)(PendingRequest&)>& controlMethods();
  void controlVersion(PendingRequest& r);
  void controlStatus(PendingRequest& r);
  void controlWorkers(PendingRequest& r);
  void controlGroups(PendingRequest& r);
  void controlDrain(PendingRequest& r);
  void controlUndrain(PendingRequest& r);
  void controlUnquarantine(PendingRequest& r);
  void controlRegroup(PendingRequest& r);
  void controlSet(PendingRequest& r);
  void controlShutdown(PendingRequest& r);
  void controlReloadKeys(PendingRequest& r);
  Result<AllowListChange> reloadKeys();
  void startCheckpoint(PendingRequest& r);
  void finishCheckpoint(PendingRequest& r, Result<InMessage> reply);
  void reloadConfig();
  void answerDrainWaiters();
  void updateMetrics();
  // The central PS's counters (its version, checkpoints, metrics), asked for on a thread
  // of its own once per progress period and read here when they come.
  void askCentralStats();
  void readCentralStats(Result<InMessage> reply);
  void checkLiveness();
  // How long a registration may be silent before it is declared dead.
  std::chrono::milliseconds livenessLimit() const;
  // Failure handling (coordinator_faults.cc).
  void pollGroups();
  // The answer to pollGroups()' question to group g's PS at endpoint.
  void readGroupPoll(std::uint32_t g, const std::string& endpoint, Result<InMessage> reply);
  void markQuarantined(std::uint64_t worker, std::uint32_t group);
  void failNode(const WorkerRecord& node, const std::string& why = "missed its heartbeats");
  void failGroup(std::uint32_t group, const std::string& why);
  // The end of a run: why the node of a group's PS can no longer flush it (left, died, or
  // with judge_silence silent past the liveness limit), or nothing for a live node or a
  // local PS.
  std::optional<std::string> nodeGone(std::uint32_t group, bool judge_silence = true) const;
  // The node daemon serving a group's PS; null for a PS of this daemon's own.
  const WorkerRecord* groupNode(std::uint32_t group) const;
  // After the drain: serves until every node holding a live group was heard from lately,
  // or the liveness limit passed (a node that died during the drain).
  void awaitGroupNodes();
  // A group that cannot flush at the end: failed with its members, nobody reassigned.
  void failGroupAtStop(std::uint32_t group, const std::string& why);
  std::optional<std::uint32_t> liveGroupFor() const;
  bool groupFailed(std::uint32_t g) const { return fleet_->failed(g); }
  void noteReregistration();
  // A central version seen (stats, a checkpoint): kept, and recorded in the head's state
  // file when newer than the last one recorded.
  void noteCentralVersion(std::uint64_t version);
  // Checkpoint faults (coordinator_faults.cc): newer files skipped at start-up, and writes
  // that failed since the last look (the central PS counts them), each an event.
  void reportSkippedCheckpoints();
  // Re-creates a failed group's slot on a spare group PS (the node with the most left)
  // with these members, moved there with new epochs; false when no spare is left. A spare
  // that refuses its configuration fails the group again (the next spare is tried).
  bool recreateGroup(std::uint32_t group, const std::vector<std::uint64_t>& members);
  // The keys to reach a node's group PSes: its own public key as the server key.
  CurveKeys keysForNode(const WorkerRecord& node) const;
  // Checkpoint writes that failed since the last look: an event and an error line.
  void noteCheckpointFailures(proto::CentralStats::Reader stats);
  nlohmann::json headRestartJson() const;
  nlohmann::json failuresJson(std::uint64_t lost, std::uint64_t bound) const;
  void printProgress();
  std::size_t groupsInUse() const;
  std::optional<std::string> stopReason();
  struct Accuracy {
    double value = -1;          // -1: nothing reported yet
    std::uint64_t version = 0;  // central version it was measured on
  };
  // The evaluator report on the newest central version.
  Accuracy latestAccuracy() const;
  nlohmann::json finish(const std::string& reason);
  // finish()'s steps, in order. now: a stop without --drain (nobody is waited for).
  void drainTrainers(bool now);
  void flushGroups(FinalStats* stats);
  // One group's answer to the final flush (its counters), or why there is none.
  void readFlush(std::uint32_t g, Result<InMessage> reply, FinalStats* stats);
  void queryCentral(FinalStats* stats);
  void readCentralFinal(Result<InMessage> reply, FinalStats* stats);
  Accuracy stopEvaluators(std::uint64_t final_version, bool now);
  nlohmann::json summaryJson(const RunSummary& run, const std::string& reason, double elapsed,
                             const Accuracy& final_acc) const;
  // After finish(): a restarted head whose run ended before every expected trainer came
  // back keeps answering registrations with `finished` (for up to finish_linger_s, until
  // each missing trainer has been told), so one still in its back-off stops cleanly.
  void lingerForLateTrainers(const std::atomic<bool>& stop_requested);
  // Trainers (distinct host and pid) this head has seen: registered, or told `finished`.
  std::size_t trainersSeen() const;
  // Evaluator supervision hooks (coordinator_evaluators.cc): an evaluator registered, or
  // was lost (declared dead, or left) while training goes on.
  void evaluatorJoined(const WorkerRecord& w);
  void evaluatorLost(const WorkerRecord& w, const std::string& why);

  zmq::context_t& ctx_;
  zmq::socket_t sock_;
  std::string endpoint_;
  DaemonConfig cfg_;
  Topology topo_;
  MessageLimits limits_;
  CurveKeys curve_;
  const ZapHandler* zap_ = nullptr;  // borrowed, like control_
  std::uint64_t identity_refused_ = 0;
  Registry registry_;
  std::unique_ptr<AssignmentPolicy> policy_;
  std::unique_ptr<GroupFleet> fleet_;  // the group PS slots (group_fleet.h)
  std::unique_ptr<RpcClient> central_;
  std::uint64_t next_id_ = 1;
  std::uint64_t epoch_ = 0;
  std::uint32_t next_shard_ = 0;
  bool stopping_ = false;
  bool stop_evaluators_ = false;  // evaluators stop last, after measuring the final model
  // Trainers whose registration came while stopping (host, pid): told `finished`.
  std::set<std::pair<std::string, std::uint32_t>> told_finished_;
  std::optional<Clock::time_point> training_started_;
  std::optional<double> time_to_target_s_;
  double acc_at_target_ = -1;  // the report that reached the target (later ones may dip)
  std::uint64_t stale_heartbeats_ = 0;
  std::uint64_t bad_messages_ = 0;
  std::unique_ptr<AdaptiveController> adaptive_;  // mode adaptive only
  Clock::time_point next_control_;
  std::unique_ptr<GroupConfigQueue> configs_;  // group PS configurations on their way
  std::set<std::uint64_t> admitting_;  // trainers whose registration awaits its group PS
  // Questions to servers on threads of their own (polls, stats, checkpoints, flushes),
  // each with the continuation that reads its answer on this thread.
  std::unique_ptr<PendingCalls> calls_;
  std::uint64_t regroups_ = 0;
  ControlQueue* control_ = nullptr;        // borrowed: main() owns it and outlives run()
  const std::atomic<bool>* stop_now_ = nullptr;  // borrowed (setJobFlags)
  const std::atomic<bool>* suspend_ = nullptr;
  MetricsRegistry* metrics_ = nullptr;     // the job's view of the borrowed registry
  std::unique_ptr<MetricsRegistry> job_metrics_;
  std::unique_ptr<MetricsExporter> exporter_;  // set with metrics_
  std::optional<std::chrono::microseconds> watchdog_;
  Clock::time_point next_watchdog_;
  std::atomic<bool>* reload_ = nullptr;
  KeyReloader reload_keys_;
  bool shutdown_requested_ = false;
  std::vector<std::pair<PendingRequest, std::uint64_t>> drain_waiters_;
  Clock::time_point started_ = Clock::now();
  std::uint64_t central_version_seen_ = 0;
  std::uint64_t checkpoint_failures_seen_ = 0;  // the central PS's count at the last look
  std::optional<nlohmann::ordered_json> last_checkpoint_;
  nlohmann::json events_ = nlohmann::json::array();
  // Failure handling.
  HeadStart head_;
  std::optional<double> reregistered_after_s_;  // all configured trainers back (restart)
  NodeSpares spares_;  // group PSes nodes offered beyond the slots in use (re-creation)
  std::set<std::uint64_t> failed_group_members_;  // trainers that were in a failed group
  std::uint32_t next_poll_group_ = 0;
  Clock::time_point next_poll_;
  std::set<std::pair<std::string, std::uint32_t>> quarantined_procs_;  // host, pid
  std::set<std::string> quarantined_keys_;  // CURVE public keys of quarantined workers
  std::uint64_t quarantine_refusals_ = 0;       // registrations/heartbeats refused
  std::uint64_t quarantined_total_ = 0;          // workers quarantined in this run
  std::uint64_t replayed_pushes_ = 0;           // from the last group polls
  std::map<std::uint32_t, std::uint64_t> group_replays_;
  std::uint64_t persisted_version_ = 0;
  nlohmann::json failures_ = nlohmann::json::array();  // node failures with their timings
  EvaluatorWatch evaluators_;  // is accuracy measured, since when not (evaluator_watch.h)
};

}  // namespace groupsgd::coordinator
