// A group parameter server: runs the synchronous step of its members (barrier with a
// deadline, batch-weighted mean, group optimizer step on the replica) and, every K steps,
// ships replica - base to the central PS in the background and rebases on the answer.
// Serves Pull / Push from workers and GroupConfig / Flush / GroupStatsQuery from the
// coordinator on one ROUTER socket; talks to the central PS through one DEALER (one per
// shard when central_endpoint is a shard map: docs/shards.md).
// Thread rule: create() on any thread, then run() on exactly one thread, which owns both
// sockets and all state. Other threads reach it only by messages.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

#include "groupsgd/codec/compression_spec.h"
#include "groupsgd/codec/parts.h"
#include "groupsgd/common/central_shard_map.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/message.h"
#include "groupsgd/common/payload.h"
#include "groupsgd/common/quarantine.h"
#include "groupsgd/common/status.h"
#include "groupsgd/groupps/group_stats.h"
#include "groupsgd/groupps/lr_schedule.h"
#include "groupsgd/groupps/optimizer_placement.h"
#include "groupsgd/groupps/step_barrier.h"
#include "groupsgd/groupps/step_cutoff.h"
#include "groupsgd/kernels/optimizer.h"

namespace groupsgd::groupps {

struct GroupServerConfig {
  std::uint32_t group_id = 0;
  std::string central_endpoint;        // where the central PS listens, or its shard map
  kernels::OptimizerConfig optimizer;  // the group (inner) optimizer
  // Flat ranges the group optimizer does not decay (optimizer.decay_1d false: the biases).
  std::vector<kernels::ElementRange> no_decay;
  // workers: the members step their own optimizers on the mean gradient the group PS
  // returns (docs/protocol.md, "Optimizer on the workers"); `optimizer` is then unused.
  OptimizerPlacement placement = OptimizerPlacement::kServer;
  std::uint32_t exchange_period = 1;  // K (the coordinator may change it)
  std::uint32_t step_deadline_ms = 5000;
  std::uint32_t exchange_timeout_ms = 10000;  // no answer from central: resynchronise
  double max_grad_norm = 1e4;                 // L2 norm above which a gradient is refused
  CompressionSpec delta_compression;          // group -> central encoding (error feedback here)
  bool adopt_group_id = false;  // node daemons: take the id from the first GroupConfig
  // A member whose pushes are refused as bad this many times within the window is
  // quarantined (its further messages refused with Code::kQuarantined); 0 = never.
  std::uint32_t quarantine_after = 5;
  std::uint32_t quarantine_window_ms = 60000;
  MessageLimits limits;
  CurveKeys curve;  // set: CURVE on the router (server) and toward the central PS (client)
  // Replicas and deltas larger than this travel in parts of this size, and the group
  // optimizer steps part by part, each part sent as soon as it is done.
  std::uint32_t part_bytes = kDefaultPartBytes;
  // Flow control: pushes arriving in parts are admitted while the gradients being received
  // fit in this many models (0 = automatic: members - 4, at least 1); the others wait
  // (docs/architecture.md, "Flow control").
  double inbound_budget_models = 0;
};

class GroupServer {
 public:
  static Result<std::unique_ptr<GroupServer>> create(zmq::context_t& ctx, GroupServerConfig cfg,
                                                     std::size_t param_count,
                                                     const std::string& bind_endpoint);
  const std::string& endpoint() const { return endpoint_; }
  void run(const std::atomic<bool>& stop);

 private:
  using Clock = std::chrono::steady_clock;
  GroupServer(zmq::context_t& ctx, zmq::socket_t router, std::string endpoint,
              GroupServerConfig cfg, std::size_t param_count);

  // Worker and coordinator requests.
  void handleRouter(const zmq::message_t& from, std::vector<zmq::message_t>&& frames);
  // Under CURVE: may the connection authenticated as `key` act as this sender? Refuses
  // (and counts) when not. An empty key is a plain or inproc link: nothing to check.
  bool mayActAs(const zmq::message_t& from, const std::string& key, const InMessage& msg);
  void onPull(const zmq::message_t& from, const InMessage& msg);
  void onPush(const zmq::message_t& from, const InMessage& msg);
  // The checks of a push that need none of its gradient's values: sender, membership,
  // epoch, model, tensor shape, batch, replay, step. Answers the sender itself unless the
  // push goes on (into the open step, or as late: dropped and answered when whole).
  enum class PushCheck { kAnswered, kOpenStep, kLate };
  PushCheck validatePush(const zmq::message_t& from, const InMessage& msg, std::uint64_t elements);
  // Its steps: may this sender push now (quarantine, departure, membership, epoch,
  // model; false: answered), is the tensor and batch well formed, where does its step
  // fall (replay, future, late or open).
  bool admitPusher(const zmq::message_t& from, const InMessage& msg, std::uint64_t elements);
  Status checkPushShape(const InMessage& msg, std::uint64_t elements) const;
  PushCheck placePush(const zmq::message_t& from, std::uint64_t worker, std::uint64_t step);
  // Drops a late push (its step closed): counted, answered with the current replica.
  void answerLate(const zmq::message_t& from, std::uint64_t worker, std::uint64_t step,
                  std::uint32_t batch);
  // A push in parts (group_server_parts.cc).
  void onPushPart(const zmq::message_t& from, InMessage&& msg);
  void admitOrQueue(std::uint64_t worker);
  void admit(std::uint64_t worker);
  // Admits waiting pushes in order while they fit the budget (force: all of them).
  void admitWaiting(bool force = false);
  void takePart(std::uint64_t worker, InMessage&& msg);
  void finishInbound(std::uint64_t worker);
  // Takes an unfinished push's parts out of the step's sum and forgets it.
  void abortInbound(std::uint64_t worker);
  // At a step's close: pushes of it still arriving leave the sum; answered late when whole.
  void dropUnfinishedPushes();
  void abortInboundOfNonMembers();
  std::uint64_t inboundBudgetBytes() const;
  void onGroupConfig(const zmq::message_t& from, const InMessage& msg);
  void onFlush(const zmq::message_t& from);
  void refuse(const zmq::message_t& from, const Status& why);
  // Refuses a bad update from `worker` and counts it towards its quarantine.
  void refuseBadUpdate(const zmq::message_t& from, std::uint64_t worker, const Status& why);
  // accepted/reason for a push; the member's batch and directive are filled in.
  void sendStepReply(const zmq::message_t& to, std::uint64_t worker, bool accepted,
                     const std::string& reason, double wait_ms = 0);
  OutMessage stepReplyMessage(std::uint64_t worker, bool accepted, const std::string& reason,
                              double wait_ms);
  // Its header alone (no tensor, content replica).
  OutMessage stepReplyHeader(std::uint64_t worker, bool accepted, const std::string& reason,
                             double wait_ms);
  // A push or pull from a member that has left: drop (push), tell it where to go.
  void answerDeparted(const zmq::message_t& from, std::uint64_t worker, Leaving directive,
                      std::uint32_t dropped_batch);
  // After its last gradient: remove a leaving member and remember what to tell it.
  void retireIfLeaving(std::uint64_t worker);
  void sendStats(const zmq::message_t& to);

  // The step.
  void maybeCloseStep(bool deadline_passed);
  // Its steps: past the deadline with nothing whole, admit every waiting push; else
  // count the closed step, build each waiting member's reply, step the replica (sending
  // a replica in parts part by part) and send or finish the replies.
  void admitStalledPushes();
  Clock::time_point advanceStep(const StepBarrier::Closed& closed);
  std::vector<OutMessage> stepReplies(Clock::time_point released);
  // apply: false when the step has no samples (every member skipped): replies only.
  void stepReplicaAndSend(std::vector<float>& replica, std::span<float> sum, float scale,
                          std::vector<OutMessage>& replies, bool apply);
  void finishReplies(std::vector<OutMessage>&& replies);
  // The run's samples applied as far as this group PS knows them: the central PS's total
  // in its last answer plus this group's samples stepped since (pending and in flight).
  std::uint64_t runSamples() const;
  // Before a step: the schedule's lr at runSamples() (this step's samples included) into
  // every part's optimizer. No schedule configured: the start lr, unchanged.
  void applySchedule();
  // The fixed deadline (step_deadline_ms after its first push) or, earlier, the cutoff's.
  Clock::time_point stepDeadline() const;
  Clock::time_point fixedDeadline() const;
  // A gradient joined the open step (whole): the cutoff learns when the quorum came in.
  void noteArrival();
  // Members a step closed without are not waited for until their late push is answered
  // (at the next close, with everybody, so they rejoin in step) or they pull.
  void excuseMissing(Clock::time_point closed_at);

  // optimizer.placement workers (group_server_workers.cc): the replica is the members'
  // parameters as last attached to a push; replies to a step carry the mean gradient.
  bool workersPlacement() const { return cfg_.placement == OptimizerPlacement::kWorkers; }
  // The replica equals the members' parameters at the open step's start.
  bool replicaCurrent() const { return have_model_ && workers_.synced_step == step_; }
  // The second tensor of a push for the open step: the member's parameters.
  Status checkAttachedParameters(const InMessage& msg) const;
  void takeAttachedParameters(std::uint64_t worker, const InMessage& msg);
  // A pull or a late member waits for the group's current parameters (asked for with
  // the next step's replies); answered at once when they are known or nobody can send them.
  void holdForParameters(const zmq::message_t& from, std::uint64_t worker, std::string late_reason);
  void answerHeldIfNobodyAttaches();
  void answerHeld();
  // The closed step's mean gradient (sum x scale) into the buffer the replies share.
  void computeMeanGradient(std::span<const float> sum, float scale);
  OutMessage meanGradientReply(std::uint64_t worker, double wait_ms);
  // The mean gradient (and correction, if any) into a step reply, with what the members
  // must do before their next step.
  void addMeanGradient(OutMessage& out, bool reset_optimizer,
                       const std::shared_ptr<std::vector<float>>& correction);
  // A member late by one step gets that step's reply as the others had it (mean,
  // correction, reset): it takes the same step and stays identical, no restart needed.
  void answerLateWithLastMean(const zmq::message_t& from, std::uint64_t worker,
                              const std::string& reason);
  // After the replies went: the correction and the reset were delivered.
  void afterWorkersStep();
  // The pending correction, allocated (zero) when none is pending.
  std::vector<float>& pendingCorrection();

  // Buffers pushed with the gradients (group_server_buffers.cc, Push.bufferCount).
  // A push's count must leave parameters and match the group's earlier pushes.
  Status checkBufferCount(const InMessage& msg, std::uint64_t elements) const;
  // Sum of squares of the values of `values` (which starts at flat offset `offset`) that
  // are buffers: taken out of the gradient norm bound.
  double bufferSquares(std::span<const float> values, std::size_t offset) const;
  double bufferSquares(const TensorView& view) const;
  // Placement server, after a part's optimizer step: its buffer values become the
  // members' batch-weighted mean (sum x scale).
  void setBufferMean(std::span<float> replica_part, std::span<const float> sum_part, float scale,
                     std::size_t offset) const;

  // Exchange with the central PS.
  enum class CentralRequest { kNone, kFetch, kExchange };
  Status ensureCentral();
  void requestModel();
  void maybeExchange(bool force);
  // A delta cut from the replica: `cut` (replica - base, kept for the rebase) and what
  // goes on the wire, `encoded` when compressed, else `dense` (cut plus any residual).
  struct OutgoingDelta {
    std::shared_ptr<const std::vector<float>> cut;
    std::shared_ptr<std::vector<float>> dense;
    std::shared_ptr<std::vector<std::uint8_t>> encoded;
  };
  OutgoingDelta cutDelta(bool force);
  // The DeltaPush header of this group's pending progress, on `base_version` (the central
  // PS's, or one shard's); the caller adds the tensor.
  OutMessage deltaPushMessage(std::uint64_t base_version) const;
  Status sendDelta(OutgoingDelta&& delta);
  // Error-feedback progress not yet sent (top-k and sign delta compression): a flush is
  // answered only once it is handed over, like pending samples.
  bool residualLeft() const;
  void handleCentral(std::vector<zmq::message_t>&& frames);
  // The central PS's answer, whole (received in one message or assembled from parts).
  // msg null: no readable answer (failure says why); assembled: the model's parts.
  void onCentralAnswer(const InMessage* msg, const Status& failure, const TensorView* assembled);
  // What an answer did to the exchange: applied, or why not.
  struct CentralOutcome {
    bool applied = false;
    std::string reason;
  };
  // Rebases on the answer's model, or (no usable model) gives a delta in flight up.
  CentralOutcome takeCentralModel(const InMessage* msg, const Status& failure,
                                  const TensorView* assembled, CentralRequest was);
  CentralOutcome loseAnswer(CentralRequest was, std::string reason);
  // replica = central + (replica - base - cut_delta), base = central (cut_delta may be null).
  void rebaseOn(const TensorView& central, const std::vector<float>* cut_delta);
  // The same for the range starting at `offset` that `central` covers; had_model: whether
  // the replica held a model before this answer (else the range is copied).
  void rebaseRange(const TensorView& central, const std::vector<float>* cut_delta,
                   std::size_t offset, bool had_model);
  // After an answer was taken: the exchange a flush or new samples want, the flush waiters.
  void afterCentralAnswer();

  // A sharded central PS (group_server_shards.cc): one DEALER per shard, a request goes to
  // every shard (the delta cut by range), and the answers are taken together once every
  // shard has answered, range by range.
  struct ShardLink {
    CentralShard where;
    std::optional<zmq::socket_t> sock;
    std::size_t at = 0;                  // which of where's failover list sock talks to
    std::uint64_t answered_version = 0;  // the newest version this shard answered us with
    std::uint64_t base_version = 0;      // this shard's version the base range descends from
    PartAssembler parts;                 // its answer arriving in parts
    std::optional<InMessage> answer;     // its whole answer (not in parts)
    Status failure = Status::ok();       // no readable answer: why
    bool answered = false;
  };
  bool sharded() const { return !shards_.empty(); }
  Status ensureShards();
  void resetShards();
  Status sendToShards(bool fetch, const std::vector<float>* delta);
  void handleShard(std::size_t k, std::vector<zmq::message_t>&& frames);
  void onShardAnswers();
  // exchange_timeout_ms passed: the shards that answered are taken, the others count as
  // failed (their ranges rolled out, their sockets reset).
  void timeOutShards();
  std::vector<ShardLink> shards_;
  void finishExchange(const CentralOutcome& outcome);
  void checkExchangeTimeout();
  void rollOutLostDelta();
  void answerFlushWaiters();

  zmq::context_t& ctx_;
  zmq::socket_t router_;
  std::optional<zmq::socket_t> central_;
  std::string endpoint_;
  GroupServerConfig cfg_;
  std::uint64_t epoch_ = 0;
  bool group_id_adopted_ = false;

  StepBarrier barrier_;
  struct Waiting {
    zmq::message_t routing_id;
    std::uint64_t worker = 0;
    Clock::time_point arrived;
    std::string late_reason{};  // set: its gradient was late (dropped), it waits to rejoin
  };
  // Members that pushed for the open step, and late members waiting for its close.
  std::vector<Waiting> waiting_;
  struct WorkerSteps {
    std::uint64_t synced_step = 0;  // the replica is the members' parameters at this step
    std::shared_ptr<std::vector<float>> mean;        // last closed step's mean gradient
    std::shared_ptr<std::vector<float>> correction;  // added by the members at the next step
    bool reset_optimizer = false;  // the next step's replies tell everyone to restart it
    // What the last closed step's replies carried besides the mean (for a late member).
    std::shared_ptr<std::vector<float>> last_correction;
    bool last_reset = false;
    std::vector<Waiting> held;  // pulls and late members waiting for the parameters
  };
  WorkerSteps workers_;
  StepCutoff cutoff_;
  // Samples of every push acknowledged per worker (what a worker that died had trained).
  std::unordered_map<std::uint64_t, std::uint64_t> acknowledged_;
  std::unordered_map<std::uint64_t, Leaving> departed_;  // left members -> what they were told
  std::unordered_map<std::uint64_t, std::string>
      member_keys_;  // CURVE key per worker ever configured
  // The step of each worker's newest gradient taken into a step: an older or equal step
  // pushed again is a replay, not a late gradient.
  std::unordered_map<std::uint64_t, std::uint64_t> last_step_;
  // Push.bufferCount, as the first checked push stated it (the flat vector's last values).
  std::optional<std::uint64_t> buffer_count_;
  QuarantinePolicy quarantine_;
  std::optional<Clock::time_point> step_opened_;
  std::uint64_t step_ = 0;
  // The group optimizer, one per reply part (element-wise, so identical to one over the
  // whole model): each part is stepped and sent before the next is computed.
  std::uint64_t part_elements_ = 0;  // the replica's part size (whole model: not in parts)
  std::vector<kernels::Optimizer> optimizers_;
  // The lr schedule from the coordinator's GroupConfig (none yet: cfg_.optimizer.lr), and
  // the central PS's run-wide sample total from its last answer (docs/architecture.md,
  // "Learning-rate schedules").
  std::optional<LrSchedule> schedule_;
  std::uint64_t central_run_samples_ = 0;

  // Pushes arriving in parts, per worker.
  struct InboundPush {
    zmq::message_t routing_id;
    std::uint64_t step = 0;
    std::uint32_t batch = 0;
    float loss = 0;
    PartStream stream;
    bool admitted = false;
    bool late = false;           // its step closed meanwhile: dropped and answered when whole
    std::uint64_t reserved = 0;  // bytes of the budget it holds
    double squares = 0;
    std::vector<InMessage> summed;  // parts in the step's sum, to take out if it fails
    std::vector<InMessage> held;    // parts received before it was admitted
  };
  // Flow control of the pushes arriving in parts (group_server_parts.cc).
  struct Inbound {
    std::unordered_map<std::uint64_t, InboundPush> pushes;
    std::vector<std::uint64_t> admission_queue;  // waiting for the budget, oldest first
    std::uint64_t admitted_bytes = 0;
    // Room reserved for a member's next push, granted in its step reply (creditBytes),
    // so the member sends it whole at once while this thread is still busy (an exchange,
    // the sum's clearing); taken over by the push, released if the member goes.
    std::unordered_map<std::uint64_t, std::uint64_t> granted;
  };
  Inbound inbound_;
  void grantNextPush(std::uint64_t worker, OutMessage* reply);
  void releaseGrant(std::uint64_t worker);

  bool have_model_ = false;
  // The replica is sent as it is (replies share it, no copy) and written in place once no
  // reply holds it any more; writableReplica() copies it aside only while one still does.
  std::vector<float>& writableReplica();
  const std::vector<float>& replica() const { return *replica_; }
  std::shared_ptr<std::vector<float>> replica_;
  std::shared_ptr<std::vector<float>> spare_;  // the previous replica buffer, for reuse
  Payload replica_payload_;                    // replica_ while unchanged: what replies carry
  PayloadPool send_pool_;                      // delta buffers, reused once sent

  // The exchange with the central PS (group_server_exchange.cc).
  struct Exchange {
    std::vector<float> base;  // central model the replica descends from
    std::uint64_t base_version = 0;
    // The in-flight delta as cut (replica at the cut = base + this), until the answer.
    std::shared_ptr<const std::vector<float>> cut_delta;
    std::optional<kernels::Compressor> compressor;  // deltas, when compressed
    std::uint32_t steps_since_cut = 0;
    CentralRequest in_flight = CentralRequest::kNone;
    Clock::time_point in_flight_since;
    bool force_after_answer = false;  // a flush or regroup came while a request was out
    PartAssembler central_parts;      // the central PS's answer arriving in parts
    // The newest delta's number (DeltaPush.exchangeSeq, the shards' cut marks): counted up
    // from this PS's start in microseconds, so a restarted group PS goes on above.
    std::uint64_t seq =
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count());
  };
  Exchange exchange_;
  std::vector<zmq::message_t> flush_waiters_;
  // The counters it keeps as it goes; sendStats() fills in the rest (id, step, members,
  // acknowledged samples, quarantined workers).
  GroupStats counters_;
};

}  // namespace groupsgd::groupps
