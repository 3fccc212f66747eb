// Consistent cuts across central shards (docs/shards.md, "Consistent cut"): the head takes
// them (every central_cut_interval_s) and writes the manifest; a restart of the head or
// of a shard resumes from the manifest's cut, not from each shard's newest checkpoint.
// Thread rule: CentralCutTaker is built on any thread, then run() (or takeCut()) on one
// thread, which owns its sockets from then on. The free functions: the caller's thread.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "groupsgd/centralps/central_server.h"
#include "groupsgd/centralps/shard_cut.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/transport.h"
#include "groupsgd/daemon/config.h"

namespace groupsgd::jobs {

class CentralCutTaker {
 public:
  // endpoints: shard 0 (the head's own central PS) .. S-1; last_cut: the number of the cut
  // the manifest names now (0: none), so numbering goes on and its files are kept; cuts
  // are numbered above every cut a shard reports too. fresh_marks: shard 0 starts without
  // exchange marks (a promoted standby head): until the first cut is taken, a freeze in
  // which shard 0 has no mark of a group another shard has is released at once (that
  // group has not exchanged with this head yet, and its mark could never be reached).
  CentralCutTaker(zmq::context_t& ctx, const daemon::DaemonConfig& cfg, const CurveKeys& keys,
                  std::vector<std::string> endpoints, std::vector<centralps::ShardRange> ranges,
                  std::uint64_t last_cut, bool fresh_marks = false);
  // A cut every central_cut_interval_s until stop; logs what each cost.
  void run(const std::atomic<bool>& stop);
  // One cut now: freeze every shard, commit at the highest marks, write the manifest once
  // every shard's file is durable and their marks agree. An error releases every shard
  // and leaves the manifest as it was (waiting() says whether it was fresh_marks' wait).
  Result<centralps::ShardCut> takeCut();
  bool waiting() const { return waiting_; }

 private:
  Result<InMessage> callShard(std::size_t k, int phase, std::chrono::milliseconds timeout);
  void releaseAll();

  daemon::DaemonConfig cfg_;
  std::vector<RpcClient> shards_;
  std::vector<centralps::ShardRange> ranges_;
  std::uint64_t last_cut_ = 0;     // the manifest's
  std::uint64_t next_cut_ = 1;     // numbers are never reused, a failed cut's included
  std::vector<double> pauses_ms_;  // each cut's longest hold (freeze to unfreeze)
  std::size_t failed_ = 0;
  std::size_t failed_in_a_row_ = 0;  // backs the next try off: interval x 2^n, n <= 6
  bool fresh_marks_ = false;         // until the first cut: see the constructor
  bool waiting_ = false;             // the last try was released for fresh_marks_
  std::size_t waits_logged_ = 0;
};

// Restart: the cut in cfg.checkpoint_dir (the head's; a shard's parent folder) that shard
// k resumes from, checked against this run and on disk (its file there, its version):
// nullopt when there is no manifest. Errors name the shard and delete nothing.
Result<std::optional<centralps::CentralConfig::CutResume>> cutResumeFor(
    const daemon::DaemonConfig& cfg, const std::vector<centralps::ShardRange>& ranges,
    std::size_t k, centralps::ShardCut* cut = nullptr);

// The head, once the shards answered: each of shards 1..S-1 (endpoints[k-1]) loads its
// own file of the cut (a shard that started without the manifest, or that ran on while
// the head was down) and must then hold the version the manifest names for it. Errors
// name the shard and delete nothing.
Status restoreShardsToCut(zmq::context_t& ctx, const daemon::DaemonConfig& cfg,
                          const CurveKeys& keys, const std::vector<std::string>& endpoints,
                          const centralps::ShardCut& cut);

}  // namespace groupsgd::jobs
