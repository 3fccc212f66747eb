// The worker client library: what any training program links to take part in groupsgd.
// CoordinatorClient registers, heartbeats and leaves; GroupClient pulls the group replica
// and pushes gradients. Every call has a deadline and returns a Status on failure.
// Thread rule: each client object is used by one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "groupsgd/client/endpoint_list.h"
#include "groupsgd/codec/compression_spec.h"
#include "groupsgd/common/message.h"
#include "groupsgd/common/payload.h"
#include "groupsgd/common/status.h"
#include "groupsgd/common/transport.h"

namespace groupsgd::client {

enum class Role { kTrainer, kEvaluator, kTool, kNode };

struct Assignment {
  std::uint64_t worker_id = 0;
  std::uint64_t epoch = 0;
  std::uint32_t group_id = 0;
  std::string group_endpoint;
  std::string central_endpoint;
  std::uint32_t batch_size = 0;
  std::uint32_t exchange_period = 1;
  std::uint32_t shard_index = 0;
  std::uint32_t shard_count = 1;
  std::string model;
  std::uint64_t param_count = 0;
  std::uint64_t seed = 0;
  std::uint32_t heartbeat_ms = 1000;
  std::string compression = "dense";  // gradient encoding (the worker may override it)
  std::string group_server_key;       // CURVE: the group PS's node key ("" = the head's)
  bool node_pool = false;  // a multi-job daemon's front took this node daemon into its pool
  // optimizer.placement workers: the group PS answers steps with the mean gradient and
  // the trainer steps its own optimizer (a trainer without one must refuse the run).
  bool optimizer_on_workers = false;
  // data_allocation ranges: sample the ranges claimData() grants, not the shard.
  bool data_ranges = false;
};

// Positions [begin, end) of one epoch's permutation of the training set (DataClaim).
struct DataRange {
  std::uint64_t epoch = 0;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

// One step as the trainer's timers saw it (Heartbeat.recentSteps).
struct StepTiming {
  std::uint64_t step = 0;
  std::uint32_t batch = 0;
  float compute_ms = 0, comm_ms = 0, wait_ms = 0;
};

struct HeartbeatStats {
  std::uint64_t samples_trained = 0;
  std::uint64_t steps = 0;
  float last_loss = 0;
  float compute_ms = 0;
  float comm_ms = 0;
  float test_accuracy = -1;
  std::uint64_t evaluated_version = 0;
  std::uint32_t batch_size = 0;
  float wait_ms = 0;
  std::vector<StepTiming> recent;  // steps since the last heartbeat, newest last
  bool speed_changed = false;      // sent early (see Heartbeat.speedChanged)
  std::uint32_t group_slots = 0;   // a pooled node daemon, to the front: its slots
  float test_loss = -1;            // evaluators: validation loss of evaluated_version
};

// A job a pooled node daemon serves group PSes for (HeartbeatReply.placements).
struct NodePlacement {
  std::string job;
  std::uint64_t job_id = 0;
  std::string coordinator;
  std::uint32_t slots = 0;
  std::string settings;  // JSON: the job's group PS options
};

struct HeartbeatAnswer {
  bool stop = false;
  bool reregister = false;
  std::vector<NodePlacement> placements;  // pooled node daemons only
  bool measure_now = false;               // evaluators: the final model waits for a reading
  std::string compression;                // trainers: encode gradients so now ("" = as assigned)
};

// A model the daemon learns from its workers (daemon model "external"): stated with every
// registration; `initial` (param_count floats) travels with new registrations only.
struct ModelDescription {
  std::uint64_t param_count = 0;
  std::string fingerprint;
  std::string layout;  // the text the fingerprint hashes (Register.modelLayout), or ""
  Payload initial;
  // The last buffer_count of the param_count values are buffers (batch-norm statistics),
  // averaged by the group PS instead of stepped (Push.bufferCount); 0 = none.
  std::uint64_t buffer_count = 0;
};

// A node daemon hosting a central shard (Register.centralShard, docs/shards.md).
struct CentralShardOffer {
  std::uint32_t index = 0;  // K, 1..S-1
  std::uint32_t count = 0;  // S
  std::uint64_t begin = 0, end = 0;
  std::string endpoint;
  std::string model;
  std::uint64_t seed = 0;
};

class CoordinatorClient {
 public:
  // curve: this process's keys (empty = plain link). endpoint: one endpoint or a
  // comma-separated list (EndpointList): after a call that gets no answer the next one
  // is used, so retries with back-off go round the list. A malformed list keeps the text
  // as one endpoint; check it with EndpointList::parse first.
  CoordinatorClient(zmq::context_t& ctx, const std::string& endpoint, std::uint64_t job_id,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(5000),
                    const CurveKeys& curve = {});
  // worker_id 0 registers a new worker; a known id fetches that worker's current
  // assignment (after a regroup moved it).
  // `epoch` is that of the assignment the known id came with (the coordinator refuses an
  // id from an earlier head incarnation).
  Result<Assignment> registerAs(Role role, const std::string& name, std::uint64_t worker_id = 0,
                                const std::vector<std::string>& endpoints = {},
                                std::uint64_t epoch = 0);
  Result<HeartbeatAnswer> heartbeat(const Assignment& a, const HeartbeatStats& stats);
  // samples_unconfirmed: samples of pushes that got no positive answer (Leave's
  // samplesUnconfirmed; the coordinator reconciles them with its groups' counts).
  Status leave(const Assignment& a, std::uint64_t samples_trained, std::uint64_t steps,
               std::uint64_t samples_unconfirmed = 0);
  // data_allocation ranges: acknowledges `acks` (trained) and returns the next range to
  // train (empty with done: the trainer stops; what it holds beyond acks goes back).
  Result<std::vector<DataRange>> claimData(const Assignment& a, std::uint64_t dataset_size,
                                           const std::vector<DataRange>& acks, bool done);
  // Sent with every later registration (external models); unset for the built-in ones.
  void describeModel(ModelDescription model) { model_ = std::move(model); }
  // The job to join by name (a daemon hosting several jobs; "" = the only one running).
  // A registration the daemon's front answers with a JobRedirect is sent again to the
  // job's own coordinator, and every later message carries that job's id (jobId()). When
  // the job's coordinator falls silent, the next call goes back to the front.
  void joinJob(std::string name) { job_ = std::move(name); }
  // A node daemon: offer this many group PS slots with every registration. A multi-job
  // daemon's front takes the node into its pool (Assignment.node_pool); a coordinator
  // ignores the field.
  void offerGroupSlots(std::uint32_t slots) { group_slots_ = slots; }
  // A node daemon hosting a central shard: offer it with every registration (a head
  // gathering its shards takes it; a running coordinator ignores the field).
  void offerCentralShard(CentralShardOffer offer) { central_shard_ = std::move(offer); }
  // The job id in this client's headers: the constructor's, or the redirect's.
  std::uint64_t jobId() const { return job_id_; }
  // Whether calls go to a job's coordinator learnt from a redirect.
  bool redirected() const { return redirected_; }
  // Follows another client's redirect (a second client of the same worker process):
  // calls go to this job coordinator, with this job id, until it falls silent.
  void useJobCoordinator(const std::string& endpoint, std::uint64_t job_id);
  // The endpoint the next call goes to.
  const std::string& endpoint() const { return rpc_->endpoint(); }
  // Each call's deadline (the constructor's timeout): a caller with a deadline of its
  // own (registration within --connect-timeout-ms) shortens it, then restores it.
  std::chrono::milliseconds timeout() const { return timeout_; }
  void setTimeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 private:
  // rpc_->call, moving on to the next endpoint of the list when nothing answered.
  Result<InMessage> call(OutMessage&& out);
  OutMessage registration(Role role, const std::string& name, std::uint64_t worker_id,
                          const std::vector<std::string>& endpoints, std::uint64_t epoch) const;
  // Talks to the job's coordinator from now on (a JobRedirect).
  Status followRedirect(const InMessage& reply);
  // Fencing (a head list): an assignment from a head of an older incarnation than one
  // this client already followed comes from a superseded head (a primary partitioned from
  // the standby that took over): refused, and the next call tries the next endpoint.
  Status checkIncarnation(std::uint64_t epoch);

  zmq::context_t& ctx_;
  std::vector<std::string> endpoints_;
  std::size_t at_ = 0;
  CurveKeys curve_;
  std::unique_ptr<RpcClient> rpc_;
  std::optional<ModelDescription> model_;
  std::uint64_t job_id_;
  std::string job_;
  std::uint32_t group_slots_ = 0;
  CentralShardOffer central_shard_;  // index 0: none
  bool redirected_ = false;          // rpc_ goes to a job's coordinator, not to endpoints_[at_]
  // The job coordinator this client fell back from (silent): a registration there is
  // still closed there (leave()), not at the front, which does not know it.
  std::string fell_back_from_;
  std::chrono::milliseconds timeout_;
  std::uint64_t newest_incarnation_ = 0;  // of the heads of endpoints_ this client followed
};

// What the group PS answered to a pull or a push; the replica went into the caller's span.
enum class Directive { kContinue, kReassign, kStop };

struct StepAnswer {
  std::uint64_t step = 0;           // the step the replica is for (push here next)
  std::uint64_t model_version = 0;  // central version the replica descends from
  bool accepted = true;             // push: false if the gradient was dropped (late)
  std::string reason;
  double wait_ms = 0;            // push: time the gradient waited at the barrier
  std::uint32_t batch_size = 0;  // batch to use from now on (0 = unchanged)
  Directive directive = Directive::kContinue;
  // Optimizer on the workers (docs/protocol.md): the reply held the step's mean gradient
  // (written into the mean gradient target, not into params) and perhaps a correction to
  // add to the parameters before stepping; what to do before / at the next push.
  bool mean_gradient = false;
  bool correction = false;
  bool reset_optimizer = false;
  bool attach_parameters = false;  // send the parameters with the next push
};

class GroupClient {
 public:
  // compression: how gradients are encoded (error feedback kept here, per sender).
  GroupClient(zmq::context_t& ctx, const Assignment& a, std::uint64_t job_id,
              std::chrono::milliseconds timeout, CompressionSpec compression = {},
              const CurveKeys& curve = {});
  // Encodes the next pushes so (compress_gradients auto); any error-feedback residual of
  // the previous encoding is dropped.
  void setCompression(CompressionSpec compression);
  // Fetches the current replica into params (size must equal the model's).
  Result<StepAnswer> pull(std::span<float> params);
  // Pushes a gradient for step; waits for the step to close and returns the next replica.
  // attach: the parameters, sent with it when the last reply asked (attach_parameters).
  Result<StepAnswer> push(std::uint64_t step, std::span<const float> grad, std::uint32_t batch,
                          float loss, float compute_ms, std::span<float> params,
                          std::span<const float> attach = {});
  // The same, sending a buffer the caller shares with the message (no copy when dense):
  // the caller must not write into it until push() has returned.
  Result<StepAnswer> push(std::uint64_t step, const Payload& grad, std::uint32_t batch, float loss,
                          float compute_ms, std::span<float> params,
                          std::span<const float> attach = {});
  // A skipped step (the caller's gradient was not finite): counted at the group's barrier
  // so the group does not wait for this member, with no weight in the mean (a zero
  // tensor, batch 0, Push.skipped); waits for the step to close like push().
  Result<StepAnswer> pushSkipped(std::uint64_t step, float compute_ms, std::span<float> params);
  // Optimizer on the workers: where a mean gradient reply's tensors go (param_count each).
  // Unset, such a reply is an error (this trainer has no optimizer).
  void setMeanGradientTargets(std::span<float> mean_grad, std::span<float> correction) {
    mean_target_ = mean_grad;
    correction_target_ = correction;
  }
  // A buffer of param_count floats to compute the next gradient into: push() sends exactly
  // this span without copying it (any other span is copied). Contents unspecified; valid
  // until the next push().
  std::span<float> gradientBuffer();
  // A gradient larger than this travels in parts of this size (docs/protocol.md, "Parts");
  // default kDefaultPartBytes. Replies come in whatever parts the group PS chose.
  void setPartBytes(std::uint32_t bytes) { part_bytes_ = bytes; }
  // The last `count` values of every gradient pushed are the caller's buffers
  // (Push.bufferCount): the group PS averages them instead of stepping them.
  void setBufferCount(std::uint64_t count) { buffer_count_ = count; }

 private:
  // Sends a request (whole or in parts, the parts beyond the window once the group PS
  // sends credit) and reads its StepReply into params.
  Result<StepAnswer> exchange(std::vector<std::vector<zmq::message_t>>&& request,
                              std::span<float> params);
  // A push header (its tensor is added by the caller).
  OutMessage pushMessage(std::uint64_t step, std::uint32_t batch, float loss,
                         float compute_ms) const;
  Result<StepAnswer> readAnswer(const InMessage& reply, std::span<float> params,
                                std::chrono::steady_clock::time_point deadline);
  // Adds `attach` (copied) as the push's second tensor; whole message then.
  void attachParameters(OutMessage& out, std::span<const float> attach);
  std::span<float> mean_target_, correction_target_;
  std::uint32_t part_bytes_ = kDefaultPartBytes;
  std::uint64_t credit_bytes_ = 0;  // granted with the last reply for the next push
  std::uint64_t buffer_count_ = 0;  // Push.bufferCount of every push
  RpcClient rpc_;
  Assignment assignment_;
  std::uint64_t job_id_;
  std::chrono::milliseconds timeout_;
  PayloadPool pool_;                               // gradient buffers handed to zero-copy sends
  std::shared_ptr<std::vector<float>> next_grad_;  // gradientBuffer(), until pushed
  std::optional<kernels::Compressor> compressor_;  // non-dense encodings only
  std::vector<std::shared_ptr<std::vector<std::uint8_t>>> encoded_;  // reused when free
};

// Fetches the central model (evaluators, tools).
Result<std::uint64_t> fetchCentralModel(RpcClient& central, std::uint64_t job_id,
                                        std::span<float> params, std::chrono::milliseconds timeout);

}  // namespace groupsgd::client
