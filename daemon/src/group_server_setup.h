// The translation of the daemon's configuration into a group PS's configuration, shared
// by role all (main.cc) and role node (node.cc) so both run identical group PSes.
// Thread rule: a pure function; any thread.
#pragma once

#include <cstdint>
#include <string>

#include "groupsgd/common/curve_keys.h"
#include "groupsgd/daemon/config.h"
#include "groupsgd/groupps/group_server.h"

namespace groupsgd::daemon {

// cfg must have passed validate() (its compression specs parse).
groupps::GroupServerConfig groupServerConfig(const DaemonConfig& cfg, std::uint32_t group_id,
                                             const std::string& central_endpoint,
                                             const CurveKeys& curve);

}  // namespace groupsgd::daemon
