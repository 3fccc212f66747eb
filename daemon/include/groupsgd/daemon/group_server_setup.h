// The translation of the daemon's configuration into a group PS's configuration, shared
// by role all (main.cc) and role node (node.cc) so both run identical group PSes; and the
// job's group PS options a multi-job daemon hands to the node daemons serving the job.
// Thread rule: a pure function; any thread.
#pragma once

#include <cstdint>
#include <string>

#include "groupsgd/common/curve_keys.h"
#include "groupsgd/daemon/config.h"
#include "groupsgd/groupps/group_server.h"

namespace groupsgd::daemon {

// cfg must have passed validate() (its compression specs parse). Reads the options the
// table marks as read by a group PS at its start, and the job id.
groupps::GroupServerConfig groupServerConfig(const DaemonConfig& cfg, std::uint32_t group_id,
                                             const std::string& central_endpoint,
                                             const CurveKeys& curve);

// The group optimizer's lr schedule the coordinator sends with every GroupConfig: base lr
// optimizer.lr, the decay's end optimizer.schedule_samples or else max_samples.
groupps::LrSchedule lrScheduleOf(const DaemonConfig& cfg);

// The options of a job its group PSes read at their start (the option table's group PS
// column), as JSON text in config-file form (NodePlacement.settings).
std::string groupSettingsJson(const DaemonConfig& job);

// A node daemon's configuration for one job's group PSes: the node's own (bind_host,
// CURVE, give_up_s, ...) with the job's settings on top. Refuses settings that do not
// parse or name an option this build does not know.
Status applyGroupSettings(const std::string& settings, DaemonConfig* node);

}  // namespace groupsgd::daemon
