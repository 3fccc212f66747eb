// Role standby (docs/reliability.md, "Standby head"): follows the primary head's
// replication stream into a replica of its central PS, acknowledging each version, until
// the primary has been silent standby_takeover_ms (or `groupsgdctl failover` asks); then
// returns the replica to promote from. Its control socket answers status and failover.
// Thread rule: the main thread (it owns the socket and the replica).
#pragma once

#include <atomic>
#include <optional>

#include <zmq.hpp>

#include "groupsgd/centralps/standby_replica.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/daemon/config.h"
#include "groupsgd/ops/control_server.h"

namespace groupsgd::daemon {

// The replica to take over with, or nullopt when stopped (a signal) first. Errors: the
// socket could not be made. endpoint_file (if set) gets cfg.listen once the standby has
// its first snapshot.
Result<std::optional<centralps::ReplicaState>> followPrimary(zmq::context_t& ctx,
                                                             const DaemonConfig& cfg,
                                                             const CurveKeys& keys,
                                                             const std::atomic<bool>& stop,
                                                             ops::ControlServer* control);

}  // namespace groupsgd::daemon
