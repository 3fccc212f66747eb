// A node daemon in the pool of a multi-job daemon (groupsgdd --serve; docs/jobs.md, "Node
// daemons"): it offered its node_groups slots at the front and heartbeats there; each
// heartbeat reply lists the jobs placed on it. For each new placement a thread serves the
// job as a single-run node serves its head (serveHead: the job's coordinator, its central
// PS, its model's size, its group PS options from the placement); a job that ends says
// stop to it, and a placement the front no longer lists is stopped and its slots free.
// Thread rule: servePool() on the node's main thread; one thread per placement.
#pragma once

#include <atomic>
#include <functional>

#include <zmq.hpp>

#include "groupsgd/client/client.h"
#include "groupsgd/common/curve_keys.h"
#include "groupsgd/daemon/config.h"

namespace groupsgd::node {

// The daemon configuration this room is built from (daemon/).
using daemon::DaemonConfig;

// `front`: the client that registered (me: its assignment). Returns the process exit
// code: 0 on a stop, 1 when the front stayed silent for give_up_s.
int servePool(const DaemonConfig& cfg, zmq::context_t& ctx, client::CoordinatorClient& front,
              client::Assignment me, const CurveKeys& keys, const std::atomic<bool>& stop,
              const std::function<void()>& between_heartbeats);

}  // namespace groupsgd::node
