// A consistent cut across central shards (docs/shards.md, "Consistent cut"): one
// checkpoint file per shard, all holding exactly the same exchanges, named by a manifest
// the head writes atomically beside its own checkpoints, DIR/shard_cut.json. Shard k's
// file is DIR/cut-<N>.gsgd for k = 0 and DIR/shard-k/cut-<N>.gsgd otherwise (N: the cut's
// number, 20 digits); the manifest names it relative to DIR. The manifest carries a CRC of
// its own content, so an edited one is refused rather than half believed.
// Thread rule: plain functions of their arguments; blocking disk I/O.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "groupsgd/centralps/shard_plan.h"
#include "groupsgd/common/status.h"

namespace groupsgd::centralps {

inline constexpr char kShardCutFile[] = "shard_cut.json";

// The newest exchange taken from each group (group id -> exchange sequence number).
using ExchangeMarks = std::map<std::uint32_t, std::uint64_t>;

struct ShardCutEntry {
  std::size_t begin = 0, end = 0;  // the shard's range of the flat vector
  std::uint64_t version = 0;       // its model version at the cut
  std::string file;                // relative to the manifest's directory
};

struct ShardCut {
  std::uint64_t number = 0;  // 1, 2, ... in the order the head took them
  std::string model;         // the run's model name
  std::string split;         // central_shard_split
  std::uint64_t seed = 0;
  std::vector<ShardCutEntry> shards;  // shard 0 first
  ExchangeMarks marks;                // equal on every shard at the cut
  std::uint64_t run_samples = 0;      // shard 0's (the run's) samples at the cut
  double pause_ms = 0;                // the longest hold of a shard while it was taken
};

// "cut-00000000000000000007.gsgd"; and shard k's file relative to the manifest's directory.
std::string cutFileName(std::uint64_t number);
std::string cutFileFor(std::size_t shard, std::uint64_t number);

// The manifest's text (with its CRC) and its atomic write into dir (which must exist).
std::string shardCutJson(const ShardCut& cut);
Status writeShardCut(const std::string& dir, const ShardCut& cut);

// Reads dir's manifest. NotFound when there is none; DataLoss when it is not a manifest
// (unparsable, a field missing, the CRC does not match: edited or torn).
Result<ShardCut> readShardCut(const std::string& dir);

// Whether the cut belongs to this run: the same model, seed, split, shard count and
// ranges, each shard's file named as its number says. InvalidArgument naming the shard
// or the field otherwise.
Status checkShardCut(const ShardCut& cut, const std::string& model, std::uint64_t seed,
                     const std::string& split, const std::vector<ShardRange>& ranges);

// Shard k's file of the cut, checked on disk (there, readable, its version and size the
// manifest's): its path. NotFound / DataLoss / InvalidArgument naming the shard otherwise.
Result<std::string> shardCutFilePath(const std::string& dir, const ShardCut& cut, std::size_t k);

// Deletes the cut files in dir other than cuts `keep_a` and `keep_b` (the one just written
// and the one the manifest names now); failures are returned as warnings.
std::vector<std::string> pruneCutFiles(const std::string& dir, std::uint64_t keep_a,
                                       std::uint64_t keep_b);

}  // namespace groupsgd::centralps
