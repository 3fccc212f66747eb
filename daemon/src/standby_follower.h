// Role standby (docs/reliability.md, "Standby head"): follows the primary head's
// replication stream into a replica of its central PS, acknowledging each version, until
// the primary has been silent standby_takeover_ms (or `groupsgdctl failover` asks); then
// returns the replica to promote from. Its control socket answers status and failover.
// Thread rule: the main thread (it owns the socket and the replica).
#pragma once

#include <atomic>
#include <optional>

#include <zmq.hpp>

#include "groupsgd/centralps/central_server.h"
#include "groupsgd/centralps/standby_replica.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/daemon/config.h"
#include "groupsgd/ops/control_server.h"

namespace groupsgd::daemon {

// What the primary's snapshot must name. A head's standby (head): role all or coordinator
// followed by exactly `text` (a sharded head's " with central shard 0 of S, parameters 0-E
// of MODEL, seed N", empty unsharded). A shard's standby: exactly `text` ("central-shard K
// of S, ...").
struct FollowedPrimary {
  bool head = true;
  std::string text;
};

// The replica to take over with, or nullopt when stopped (a signal) first. Errors: the
// socket could not be made; the primary is not the one expected (its snapshot names
// another role, shard count, cut, model or seed than `expected`). endpoint_file (if set) gets
// cfg.listen once the standby has its first snapshot. central: the primary's central PS as this
// process's flags make it (outer optimizer, no-decay ranges, store shards).
Result<std::optional<centralps::ReplicaState>> followPrimary(
    zmq::context_t& ctx, const DaemonConfig& cfg, const CurveKeys& keys,
    const centralps::CentralConfig& central, const FollowedPrimary& expected,
    const std::atomic<bool>& stop, ops::ControlServer* control);

}  // namespace groupsgd::daemon
