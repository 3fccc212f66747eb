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

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "groupsgd/adaptive/adaptive_controller.h"
#include "groupsgd/adaptive/policy/compression_choice.h"
#include "groupsgd/adaptive/registry.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/common/zap_handler.h"
#include "groupsgd/coordinator/admission_book.h"
#include "groupsgd/coordinator/best_model.h"
#include "groupsgd/coordinator/coordinator_deps.h"
#include "groupsgd/coordinator/dashboard_feed.h"
#include "groupsgd/coordinator/epoch_ledger.h"
#include "groupsgd/coordinator/evaluator_watch.h"
#include "groupsgd/coordinator/failure_ledger.h"
#include "groupsgd/coordinator/group_config_queue.h"
#include "groupsgd/coordinator/group_fleet.h"
#include "groupsgd/coordinator/head_record.h"
#include "groupsgd/coordinator/metrics_exporter.h"
#include "groupsgd/coordinator/pending_calls.h"
#include "groupsgd/coordinator/run_log.h"
#include "groupsgd/coordinator/run_summary.h"
#include "groupsgd/coordinator/topology.h"
#include "groupsgd/daemon/config.h"
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
using adaptive::LeastLoadedPolicy;
using adaptive::Registry;
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
                                                     Topology topo, CurveKeys curve = {},
                                                     CoordinatorDeps deps = {});
  // The same on a socket already bound to cfg.listen (the external-model intake's).
  static std::unique_ptr<Coordinator> createOn(zmq::context_t& ctx, zmq::socket_t sock,
                                               std::string endpoint, DaemonConfig cfg,
                                               Topology topo, CurveKeys curve,
                                               CoordinatorDeps deps = {});
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

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kRpcTimeout{5000};
  Coordinator(zmq::context_t& ctx, zmq::socket_t sock, std::string endpoint, DaemonConfig cfg,
              Topology topo, CurveKeys curve, CoordinatorDeps deps);
  // Where the run is: training, stopping (trainers told to leave, groups flushed), and at
  // last the evaluators and nodes told to stop too (after the final model is measured).
  // kFinalReading: the model is final; the evaluators are asked to measure it at once.
  enum class Phase { kTraining, kStopping, kFinalReading, kStoppingEvaluators };
  bool stopping() const { return phase_ != Phase::kTraining; }
  // When the loop's periodic duties are next due.
  struct LoopSchedule {
    Clock::time_point poll;        // the next group PS poll (one group a heartbeat period)
    std::uint32_t poll_group = 0;  // round robin
    Clock::time_point control;     // the next adaptive control window
    Clock::time_point watchdog;    // the next systemd watchdog ping
    Clock::time_point dashboard;   // the next view published for the dashboard page
  };

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
  // data_allocation ranges (coordinator_data.cc): a trainer's claim of its next sample
  // range, and the ranges of a trainer gone without saying what it trained.
  void onDataClaim(const zmq::message_t& from, const InMessage& msg, const std::string& key);
  void releaseData(const WorkerRecord& w, const char* why);
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
  // data_allocation ranges with checkpoints (coordinator_data.cc): the ledger of the
  // checkpoint this head resumed from, and the ledger kept with each new checkpoint.
  void resumeLedger();
  void recordLedgerAt(std::uint64_t checkpoint_version);
  // The standby head's view of this coordinator (coordinator_state.cc): the state sent to
  // the standby when it changed, and a promoted standby's start from the last one it got.
  void publishState();
  void publishStateIfLogChanged();
  void resumeFromFollowedState();
  void resumeLedgerFrom(const nlohmann::json& state, const Status& unreadable);
  // Mode adaptive: the controller's stage from the followed state, and each re-registering
  // trainer (same name, host and pid) back in the group it had, with its batch.
  void resumeAdaptive();
  void placeAsFollowed(WorkerRecord& w);
  // A trainer's heartbeat, before its step count is updated: adds its step times to its
  // totals and, in adaptive mode, feeds the controller its steps one by one (or the
  // heartbeat's means); an early heartbeat (a speed change) brings the next window forward
  // (coordinator_adaptive.cc).
  void observeSteps(WorkerRecord& w, const InMessage& msg);
  void applyRegroup(const ControlActions& act);
  // compress_gradients auto (coordinator_compression.cc): each window, fp16 or dense per
  // group from its members' measured links; the encoding a member of `group` must use; the
  // choices for groupsJson and the summary.
  void chooseCompressions();
  std::string gradientCompressionFor(std::uint32_t group) const;
  nlohmann::json compressionJson(std::uint32_t group) const;
  nlohmann::json compressionSummaryJson() const;
  // An event of the run (run_log.h); the entry may take more fields.
  nlohmann::json& event(const std::string& kind, const std::string& text,
                        double predicted_gain = 0) {
    return run_log_.event(kind, text, predicted_gain);
  }
  // Control socket (coordinator_control.cc).
  void serveControl();
  void handleControl(PendingRequest&& r);
  nlohmann::ordered_json statusJson() const;
  nlohmann::ordered_json workersJson() const;
  nlohmann::ordered_json groupsJson() const;
  Result<std::uint64_t> findWorker(const nlohmann::json& ref) const;
  // The worker r's "worker" param names, when it is in `state`; otherwise r is answered with
  // the error (no such worker, or refused: it is in another state) and the result is null.
  WorkerRecord* requestedWorkerIn(PendingRequest& r, WorkerState state);
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
  // The dashboard page's view of this job, published to deps_.dashboard
  // (coordinator_dashboard.cc); also samples the feed's history.
  void publishDashboard();
  nlohmann::ordered_json dashboardWorkersJson() const;
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
  // After the drain: serves until every node holding a live group was heard from since
  // heard_since (the stop), or the liveness limit passed (a node that died meanwhile).
  void awaitGroupNodes(Clock::time_point heard_since);
  // A group that cannot flush at the end: failed with its members, nobody reassigned.
  void failGroupAtStop(std::uint32_t group, const std::string& why);
  std::optional<std::uint32_t> liveGroupFor() const;
  bool groupFailed(std::uint32_t g) const { return fleet_->failed(g); }
  // PS placement (coordinator_placement.cc, ps_placement = hosts): the host group g's PS
  // runs on (this daemon's, or its node daemon's); every slot's, for the controller (empty
  // with ps_placement = order); a joining trainer's group: among the least-loaded like
  // `chosen`, one whose PS is on its host; and a group's placement for `groups`.
  std::string slotHost(std::uint32_t g) const;
  std::vector<std::string> slotHosts() const;
  std::uint32_t localGroupFor(const std::string& host, std::uint32_t chosen,
                              std::uint32_t slots) const;
  nlohmann::ordered_json placementJson(std::uint32_t g) const;
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
  void printProgress();
  std::size_t groupsInUse() const;
  std::optional<std::string> stopReason();
  struct Accuracy {
    double value = -1;          // -1: nothing reported yet
    std::uint64_t version = 0;  // central version it was measured on
    double loss = -1;           // validation loss of that version (-1: none reported)
  };
  // The evaluator report on the newest central version.
  Accuracy latestAccuracy() const;
  nlohmann::json finish(const std::string& reason);
  // finish()'s steps, in order. now: a stop without --drain (nobody is waited for).
  void drainTrainers(bool now, Clock::time_point stop_began);
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
  // Evaluator supervision hooks (coordinator_evaluators.cc): an evaluator registered, or
  // was lost (declared dead, or left) while training goes on.
  void evaluatorJoined(const WorkerRecord& w);
  // An evaluator's report (coordinator_evaluators.cc): the best so far, and with
  // keep_best the central PS writes a new best's version to checkpoint_dir/best.ckpt.
  void noteEvaluation(const WorkerRecord& w);
  void keepBest(std::uint64_t version);
  bool keepingBest() const { return cfg_.keep_best && !cfg_.checkpoint_dir.empty(); }
  void evaluatorLost(const WorkerRecord& w, const std::string& why);

  zmq::context_t& ctx_;
  zmq::socket_t sock_;
  std::string endpoint_;
  DaemonConfig cfg_;
  Topology topo_;
  MessageLimits limits_;
  CurveKeys curve_;
  CoordinatorDeps deps_;  // borrowed pieces of the process around (see the struct)
  Registry registry_;
  std::unique_ptr<AssignmentPolicy> policy_;
  std::unique_ptr<GroupFleet> fleet_;  // the group PS slots (group_fleet.h)
  CallTarget central_;                 // the central PS, asked through calls_
  std::uint64_t epoch_ = 0;
  Phase phase_ = Phase::kTraining;
  std::uint64_t final_version_ = 0;    // the central version the final reading must reach
  Clock::time_point nodes_stop_at_{};  // nodes stop once the evaluators left, or then
  std::uint64_t bad_messages_ = 0;
  std::unique_ptr<AdaptiveController> adaptive_;  // mode adaptive only
  struct GroupCompression {
    adaptive::policy::GroupCompressionState state;
    std::uint32_t switches = 0;
  };
  std::map<std::uint32_t, GroupCompression> compression_;  // compress_gradients auto only
  std::unique_ptr<GroupConfigQueue> configs_;              // group PS configurations on their way
  // Questions to servers on threads of their own (polls, stats, checkpoints, flushes),
  // each with the continuation that reads its answer on this thread.
  std::unique_ptr<PendingCalls> calls_;
  std::unique_ptr<MetricsRegistry> metrics_;   // the job's view of deps_.metrics, or null
  std::unique_ptr<MetricsExporter> exporter_;  // set with metrics_
  std::unique_ptr<DashboardFeed> dashboard_;   // with deps_.dashboard only
  double dashboard_cpu_s_ = 0;                 // this thread's CPU spent publishing views
  LoopSchedule schedule_;
  bool shutdown_requested_ = false;
  std::vector<std::pair<PendingRequest, std::uint64_t>> drain_waiters_;  // control: drain
  std::optional<nlohmann::ordered_json> last_checkpoint_;
  AdmissionBook admission_;  // ids, shards, quarantine, what was refused
  EpochLedger data_ledger_;  // data_allocation ranges: who holds which sample range
  // A restarted head: the ledger record it went on from ({version, acknowledged,
  // held_reissued}, or {error}); a promoted standby: {from: "standby", ...}; null for a
  // fresh start (coordinator_data.cc, coordinator_state.cc).
  nlohmann::json ledger_resumed_;
  std::uint64_t published_log_changes_ = 0;
  nlohmann::json followed_adaptive_;  // a promoted standby: the primary's "adaptive" state
  struct FollowedTrainer {
    std::uint32_t group = 0, batch = 0;
    bool straggler = false;
  };
  std::map<std::string, FollowedTrainer>
      followed_trainers_;  // by name, host and pid    // run_log_.changes() in the last state
                           // published
  std::uint64_t ledger_recorded_version_ = 0;  // the newest checkpoint its ledger is kept with
  RunLog run_log_;                             // timings, the target, regroups, events
  HeadRecord head_;                            // this incarnation's start and the versions it saw
  FailureLedger failures_;                     // failed groups, lost counts, replays, spare PSes
  BestModel best_;             // the best evaluated version and its file (best_model.h)
  EvaluatorWatch evaluators_;  // is accuracy measured, since when not (evaluator_watch.h)
};

}  // namespace groupsgd::coordinator
