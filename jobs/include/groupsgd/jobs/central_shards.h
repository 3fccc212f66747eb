// A head with central_shards > 1 (docs/shards.md): its own central PS narrowed to shard 0,
// and the shards 1..S-1 that processes of role central-shard (or node daemons) serve,
// checked before the run starts; and the server of one shard. Plain functions; the
// caller's thread.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "groupsgd/centralps/central_server.h"
#include "groupsgd/centralps/shard_plan.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/daemon/config.h"

namespace groupsgd::jobs {

// The S ranges of cfg's model (centralps::planShards over its tensors).
Result<std::vector<centralps::ShardRange>> centralShardRanges(const daemon::DaemonConfig& cfg);

// c narrowed to shard `index`: its slice of the seeded initial model, the outer optimizer's
// no-decay ranges within it, its own checkpoint folder (checkpoint_dir/shard-K for K > 0),
// no best-model copies (a slice is not a model).
centralps::CentralConfig narrowToShard(centralps::CentralConfig c, const daemon::DaemonConfig& cfg,
                                       const std::vector<centralps::ShardRange>& ranges,
                                       std::size_t index);

// The shard map the head hands out (central_shard_map.h): shard 0 at shard0_endpoint, the
// others at cfg.central_shard_endpoints, each asked for its model until it answers (within
// give_up_s) with exactly its range's size.
Result<std::string> connectCentralShards(zmq::context_t& ctx, const daemon::DaemonConfig& cfg,
                                         const CurveKeys& keys,
                                         const std::vector<centralps::ShardRange>& ranges,
                                         const std::string& shard0_endpoint);

// What a sharded head's replication snapshot names after its role, and its standby
// checks (docs/shards.md, "Shard standbys"): " with central shard 0 of S, parameters 0-E
// of MODEL, seed N"; empty with central_shards 1 (the snapshot names the role alone).
Result<std::string> headShardDescription(const daemon::DaemonConfig& cfg);

// The head's central PS configuration as a standby of it builds its replica: cfg's, narrowed
// to shard 0 when central_shards > 1.
Result<centralps::CentralConfig> headCentralConfigFor(const daemon::DaemonConfig& cfg,
                                                      const CurveKeys& keys);

// Shard `index`'s central PS configuration (narrowed, with cfg's replication_listen if
// any), and the role its replication snapshot names, which a standby of this shard checks
// ("central-shard K of S, parameters B-E of MODEL, seed N").
struct CentralShardSetup {
  centralps::CentralConfig central;
  std::string role;
};
Result<CentralShardSetup> centralShardSetup(const daemon::DaemonConfig& cfg, const CurveKeys& keys,
                                            std::size_t index);

// The shard's server (its slice of the seeded model, or its own newest checkpoint, or with
// replica: a promoted standby's state), bound at listen, not running yet: role
// central-shard's server, and a node daemon's (node_central_shard). With replica it runs at
// the primary's term + 1 and tells the old primary (cfg.primary) it is superseded.
Result<std::unique_ptr<centralps::CentralServer>> startCentralShard(
    zmq::context_t& ctx, const daemon::DaemonConfig& cfg, CentralShardSetup shard,
    const std::string& listen, std::optional<centralps::ReplicaState> replica = std::nullopt);

// Role central-shard: serves shard cfg.shard_index at cfg.listen (its endpoint written to
// endpoint_file) until stop, then returns (errors name what failed). With replica: a
// promoted standby of the shard (docs/shards.md, "Shard standbys").
Status serveCentralShard(zmq::context_t& ctx, const daemon::DaemonConfig& cfg,
                         CentralShardSetup shard, const std::atomic<bool>& stop,
                         std::optional<centralps::ReplicaState> replica);

}  // namespace groupsgd::jobs
