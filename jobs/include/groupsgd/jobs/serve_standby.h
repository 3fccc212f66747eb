// groupsgdd --role standby --serve (docs/jobs.md, "Standby"): follows a --serve daemon
// started with replication_listen: its job table (jobs/src/table_replication.h) and, for
// each running job, a replica of that job's central PS, fed by the job's own replication
// stream (centralps/replication.h: snapshot, then every update in version order,
// acknowledged; synchronous unless standby_async). When the primary's table link has
// been silent standby_takeover_ms (or `groupsgdctl failover` asks) it returns what to
// promote from: runJobHost then serves the front with that table and starts each running
// job from its replica.
// Thread rule: the calling (main) thread; it owns every socket and replica.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "groupsgd/centralps/standby_replica.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/daemon/config.h"
#include "groupsgd/ops/control_server.h"

namespace groupsgd::jobs {

// One running job as followed: its central PS's replica and the endpoint of the primary's
// replication link for it (the promoted job fences it, as a one-run standby head does).
struct FollowedJob {
  centralps::ReplicaState replica;
  std::string primary;
};

// What a promoted --serve standby starts from.
struct ServeTakeover {
  std::uint64_t term = 0;                   // the primary daemon's term (its serve incarnation)
  std::string role;                         // the primary daemon's role: all | coordinator
  nlohmann::json table;                     // the job table as last replicated (JobTable::toJson)
  std::map<std::string, FollowedJob> jobs;  // the running jobs with a replica
};

// The takeover, or nullopt when stopped (a signal) first. Errors: the socket could not be
// made; the primary is not a --serve daemon (a one-run head's replication_listen). cfg: the
// standby's flags, the job-level defaults the same as the primary's (a job file names only
// what differs from them).
Result<std::optional<ServeTakeover>> followServePrimary(zmq::context_t& ctx,
                                                        const daemon::DaemonConfig& cfg,
                                                        const CurveKeys& keys,
                                                        const std::atomic<bool>& stop,
                                                        ops::ControlServer* control);

}  // namespace groupsgd::jobs
