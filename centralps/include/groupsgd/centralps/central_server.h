// The central parameter server: serves DeltaPush (merge with staleness weight f(tau),
// refuse beyond the staleness bound), Fetch and CentralStatsQuery on one ROUTER socket.
// Every request gets exactly one reply; a bad request gets an ErrorReply and a counter.
// Thread rule: create() on any thread, then run() on exactly one thread, which owns the
// socket and the store from then on. Other threads talk to it only by messages.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include <zmq.hpp>

#include "groupsgd/centralps/central_stats.h"
#include "groupsgd/centralps/central_store.h"
#include "groupsgd/centralps/checkpoint.h"
#include "groupsgd/centralps/replication_link.h"
#include "groupsgd/centralps/shard_cut.h"
#include "groupsgd/centralps/staleness.h"
#include "groupsgd/centralps/standby_replica.h"
#include "groupsgd/codec/parts.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/message.h"
#include "groupsgd/common/status.h"
#include "groupsgd/kernels/model.h"
#include "groupsgd/kernels/optimizer.h"

namespace groupsgd::centralps {

struct CentralConfig {
  kernels::ModelKind model = kernels::ModelKind::kMlp;
  std::uint64_t seed = 1;  // model initialisation
  // Non-zero: serve a zero-initialised vector of this many parameters instead of `model`
  // (benchmarks and tests of arbitrary model sizes; no model code is involved).
  std::size_t param_count = 0;
  // Non-empty: start from these values (a model the daemon learnt from a worker).
  std::vector<float> initial;
  StalenessConfig staleness;  // f(tau) and the bound
  kernels::OptimizerConfig outer{kernels::OptimizerKind::kSgd, 1.0f, 0.0f, 0.0f};
  // Flat ranges the outer optimizer does not decay (outer_optimizer.decay_1d false).
  std::vector<kernels::ElementRange> outer_no_decay;
  std::size_t shards = 1;       // key-range shards of the store
  double max_delta_norm = 1e4;  // L2 norm above which a delta is refused
  // Scale a delta by lambda = min(1, n / running mean of n), n = samples per group step
  // behind it, so a small group's few-sample deltas count for less (docs/architecture.md).
  bool sample_weighting = true;
  // Checkpoints: off when dir is empty. Written every `every_versions` versions and/or
  // `interval_s` seconds (0 = not on that trigger), on request and at shutdown, on a
  // background thread; the newest valid one is loaded at start.
  std::string checkpoint_dir;
  std::size_t checkpoint_keep = 3;
  std::uint64_t checkpoint_every_versions = 0;
  double checkpoint_interval_s = 0;
  // keep_best: keep the last kServedKept models served to evaluators (shared snapshots, no
  // copy while the version is current) so the coordinator can have the best-evaluated one
  // written (CheckpointRequest.best).
  bool keep_best = false;
  MessageLimits limits;  // job id and size limits
  // Set: CURVE on the socket. Then only the daemons' own key may push deltas, ask for a
  // checkpoint or read the counters; any admitted key may fetch the model (evaluators).
  CurveKeys curve;
  // Models larger than this are sent in parts of this size (docs/protocol.md, "Parts").
  std::uint32_t part_bytes = kDefaultPartBytes;
  // Standby head (docs/reliability.md): with replication.listen set, a standby follows
  // this central PS and (sync) every delta is acknowledged by it before it is applied.
  ReplicationConfig replication;
  std::string head_role = "all";  // sent in the snapshot: what a promoted standby becomes
  // A promoted standby: start from its replica (no checkpoint is read), and tell the old
  // primary's replication endpoint `fence_endpoint` it is superseded, twice a second.
  std::optional<ReplicaState> replica;
  std::string fence_endpoint;
  // A central shard restarted from a consistent cut (shard_cut.h): start from this file
  // (its failure fails create(); the directory's newest is not read) with the cut's marks
  // and run samples.
  struct CutResume {
    std::string file;
    std::uint64_t number = 0;
    std::uint64_t run_samples = 0;
    ExchangeMarks marks;
  };
  std::optional<CutResume> cut_resume;
};

class CentralServer {
 public:
  static Result<std::unique_ptr<CentralServer>> create(zmq::context_t& ctx, CentralConfig cfg,
                                                       const std::string& bind_endpoint);
  // The endpoint actually bound (port resolved).
  const std::string& endpoint() const { return endpoint_; }
  // Where its standby connects (replication_listen resolved; "" without one). Fixed once
  // created, so any thread may read it.
  std::string replicationEndpoint() const;
  std::size_t paramCount() const { return store_.paramCount(); }
  // This head's incarnation: the replication stream's term (before run()).
  void setTerm(std::uint64_t term);
  // Serves until stop becomes true (checked at least every 100 ms); waits for a
  // checkpoint being written before returning.
  void run(const std::atomic<bool>& stop);
  // What start-up loaded ("" when it started from a fresh initialisation).
  const std::string& resumedFrom() const { return resumed_from_; }
  // Newer checkpoint files start-up skipped (truncated, corrupt), each with the reason.
  const std::vector<std::string>& skippedCheckpoints() const { return skipped_checkpoints_; }
  std::uint64_t version() const { return store_.version(); }
  // Whether start-up restored the outer optimizer's state from the checkpoint (false: it
  // started at zero: none saved, format 1, or saved for another outer optimizer kind).
  bool outerStateRestored() const { return outer_state_restored_; }
  // The outer optimizer's state now (tests; the serving thread owns the store).
  kernels::OptimizerSnapshot outerOptimizerState() const { return store_.optimizerState(); }

 private:
  CentralServer(zmq::socket_t sock, std::string endpoint, CentralConfig cfg,
                std::vector<float> initial);
  // Start-up: the outer optimizer's state from the checkpoint resumed, when it fits.
  void restoreOuterOptimizer(const LoadedCheckpoint& resume);
  void handle(const zmq::message_t& from, std::vector<zmq::message_t>&& frames);
  // A delta whole (delta = nullptr: viewed in msg) or assembled from parts.
  void onDeltaPush(const zmq::message_t& from, const InMessage& msg,
                   const TensorView* delta = nullptr, double squares = 0);
  // Its steps: checkDelta (sender, base version, shape: refused with an error reply),
  // whyNotMerge (not finite, too long, too stale: answered with the model, not merged),
  // mergeWeight (staleness and sample weighting), the merge (mergeAndStreamReply when
  // the model goes in parts) and countMerged.
  Result<TensorView> checkDelta(const InMessage& msg, const TensorView* assembled) const;
  std::string whyNotMerge(const TensorView& delta, double squares, std::uint64_t tau);
  struct MergeWeight {
    float weight = 1.0f;
    double tau = 0;  // the staleness the weight was computed from (versions or samples)
  };
  MergeWeight mergeWeight(std::uint64_t base_version, std::uint64_t tau, std::uint64_t samples,
                          std::uint32_t steps);
  Status mergeAndStreamReply(const zmq::message_t& from, const TensorView& delta, float weight,
                             std::uint64_t tau);
  void countMerged(std::uint64_t samples, std::uint64_t tau);
  void onPart(const zmq::message_t& from, InMessage&& msg);
  void sendModel(const zmq::message_t& from, bool applied, const std::string& reason,
                 std::uint64_t tau, float weight);
  OutMessage modelReply(std::uint64_t version, bool applied, const std::string& reason,
                        std::uint64_t tau, float weight, Payload model) const;
  void refuse(const zmq::message_t& from, const Status& why);
  // Checkpoints: start a background write of the current model (one at a time).
  void startCheckpoint(std::optional<zmq::message_t> requester);
  // After a resume from checkpoint `version`: the run's samples applied then
  // (run_samples_record.h), or 0 with a warning when unrecorded.
  void resumeRunSamples(std::uint64_t version);
  void pollCheckpoint(bool wait);
  // keep_best: an evaluator's fetch keeps what it was served; a request writes one of
  // those to a file, one write at a time, off the serving thread (pollBestWrite).
  void keepServed();
  void onBestRequest(const zmq::message_t& from, std::uint64_t version, const std::string& path);
  void pollBestWrite(bool wait);
  Payload currentModel();
  // Standby head: the snapshot a standby starts from; the update shipped before a merge
  // (ok: committed; *applied when it was merged here while the standby took it);
  // the Superseded notice a promoted head keeps sending its old primary.
  ReplicationMessage replicationSnapshot();
  Status replicateMerge(const TensorView& delta, float weight, std::uint64_t samples,
                        std::uint64_t tau, bool in_parts, bool* applied);
  void pollFence();
  void startFromReplica(const ReplicaState& replica);
  // A consistent cut across shards (central_cut.cc, docs/shards.md): freeze (deltas held),
  // commit (held deltas up to the target marks taken, snapshot, unfreeze, write), release.
  void onCutRequest(const zmq::message_t& from, const InMessage& msg);
  void onCutRestore(const zmq::message_t& from, std::uint64_t number,
                    capnp::List<proto::ExchangeMark>::Reader marks);
  bool holdingDeltas() const { return cut_ && cut_->frozen; }
  void holdDelta(const zmq::message_t& from, std::optional<InMessage> whole,
                 std::optional<PartAssembler> parts);
  void noteExchange(std::uint32_t group, std::uint64_t seq);
  void advanceCut();
  void unfreeze();
  void pollCut(bool wait);
  OutMessage cutAnswer(const Status& s) const;

  zmq::socket_t sock_;
  std::string endpoint_;
  CentralConfig cfg_;
  CentralStore store_;
  std::unique_ptr<ReplicationLink> link_;  // a standby follows this head
  std::optional<zmq::socket_t> fence_;     // a promoted standby: to its old primary
  std::chrono::steady_clock::time_point last_fence_{};
  std::uint64_t term_ = 0;
  bool promoted_ = false, first_applied_logged_ = false;
  std::uint64_t uncommitted_ = 0;      // deltas refused for want of a standby
  std::vector<float> undo_;            // the model before a merge awaiting its acknowledgement
  std::uint64_t pending_samples_ = 0;  // that merge's samples (not yet counted)
  std::chrono::steady_clock::time_point last_uncommitted_log_{};
  // What the server counts as it goes (the version and the checkpoint fields are filled
  // in when it answers), plus the sum the mean staleness is taken from.
  struct Counters : CentralStats {
    double staleness_sum = 0;
  };
  Counters counters_;
  // Deltas arriving in parts, per sender connection (routing id).
  std::unordered_map<std::string, PartAssembler> inbound_;
  Payload cached_;             // snapshot of the current version (made once per version)
  PayloadPool snapshot_pool_;  // snapshot buffers, reused once no reply holds them
  std::uint64_t cached_version_ = ~0ull;
  double mean_samples_ = 0;           // running mean of samples per delta (sample weighting)
  SampleStaleness sample_staleness_;  // tau in samples (StalenessMeasure::kSamples)
  struct CheckpointJob {
    std::future<Status> done;
    std::uint64_t version = 0;
    std::string path;
    std::chrono::steady_clock::time_point started;
    std::vector<zmq::message_t> requesters;
  };
  std::optional<CheckpointJob> checkpoint_;
  static constexpr std::size_t kServedKept = 4;  // an evaluator reports after its next fetch
  std::deque<std::pair<std::uint64_t, Payload>> served_;  // oldest first
  struct BestWrite {
    std::uint64_t version = 0;
    std::string path;
    Payload model;
    zmq::message_t requester;
    std::chrono::steady_clock::time_point started;
    std::future<Status> done;
  };
  std::deque<BestWrite> best_writes_;     // the front one is being written
  std::uint64_t checkpoint_version_ = 0;  // newest durable
  std::uint64_t checkpoint_failures_ = 0;
  // After a failed write the periodic ones back off (1 s doubling to 60 s; a full disk
  // must not turn into a write attempt, and an ERROR line, per merged delta).
  double checkpoint_retry_s_ = 0;
  std::chrono::steady_clock::time_point checkpoint_retry_at_{};
  std::chrono::steady_clock::time_point last_checkpoint_ = std::chrono::steady_clock::now();
  std::string resumed_from_;
  std::vector<std::string> skipped_checkpoints_;
  bool outer_state_restored_ = false;
  // Consistent cuts: the newest exchange taken from each group, and the cut under way.
  ExchangeMarks marks_;
  struct HeldDelta {
    zmq::message_t from;
    std::optional<InMessage> whole;
    std::optional<PartAssembler> parts;
  };
  struct CutJob {
    bool frozen = true;
    std::chrono::steady_clock::time_point frozen_at;
    std::deque<HeldDelta> held;
    std::optional<zmq::message_t> committer;  // set by the commit
    ExchangeMarks target;
    std::uint64_t number = 0, keep = 0;
    // After the snapshot: what is being written, and the answer's fields.
    std::optional<std::future<Status>> write;
    std::uint64_t version = 0, run_samples = 0;
    ExchangeMarks marks;
    double pause_ms = 0;
    std::string path;
  };
  std::optional<CutJob> cut_;
  std::uint64_t cut_keep_ = 0;  // the cut a restart came from (its file is never pruned)
  // The newest cut number this shard wrote or resumed: a promoted head, which knows no
  // cut of its own, numbers its cuts above it (told in the freeze answer).
  std::uint64_t newest_cut_ = 0;
  // Samples merged before the checkpoint resumed from: every answer carries them plus this
  // run's as the run's samples (the lr schedules' position, docs/architecture.md).
  std::uint64_t resumed_samples_ = 0;
};

}  // namespace groupsgd::centralps
