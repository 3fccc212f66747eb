// A head with central_shards > 1 and no central_shard_endpoints (docs/shards.md, "Who runs
// what"): before the run starts, node daemons hosting shards 1..S-1 (node_central_shard)
// offer them in their registrations on the coordinator's socket, bound and published
// early; every other registration is told to retry. A plain function; the caller's thread.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "groupsgd/centralps/shard_plan.h"
#include "groupsgd/common/status.h"
#include "groupsgd/daemon/config.h"

namespace groupsgd::jobs {

// Answers registrations on sock (a bound ROUTER) until a node daemon has offered each of
// the shards 1..S-1 of `ranges`: their endpoints in order, comma-separated (the form of
// central_shard_endpoints). An offer naming another central_shards, range, model or seed,
// an index outside 1..S-1, or a shard already offered from another endpoint is refused
// (the node is told why and exits). Heartbeats of an earlier head's nodes are asked to
// register again. kUnavailable naming the missing shards (and the refusals seen) after
// give_up_s; kAborted when stopped() turns true.
Result<std::string> awaitNodeShards(zmq::socket_t& sock, const daemon::DaemonConfig& cfg,
                                    const std::vector<centralps::ShardRange>& ranges,
                                    const std::function<bool()>& stopped);

}  // namespace groupsgd::jobs
