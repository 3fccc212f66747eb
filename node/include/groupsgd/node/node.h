// groupsgdd --role node: a daemon on another machine that hosts group parameter servers
// for the coordinator. It learns the central PS from the coordinator, binds its group
// PSes, offers their endpoints by registering as a node, heartbeats, and stops when the
// coordinator says so (after the final flush) or on SIGTERM.
// Thread rule: runNode() runs on the calling thread; each group PS on its own thread.
#pragma once

#include <atomic>

#include "groupsgd/daemon/config.h"

namespace groupsgd::node {

// The daemon configuration this room is built from (daemon/).
using daemon::DaemonConfig;

// Returns the process exit code (0 clean stop, 1 runtime failure).
// reload_requested (SIGHUP): re-read the CURVE allow-list between heartbeats.
int runNode(const DaemonConfig& cfg, const std::atomic<bool>& stop_requested,
            std::atomic<bool>* reload_requested = nullptr);

}  // namespace groupsgd::node
