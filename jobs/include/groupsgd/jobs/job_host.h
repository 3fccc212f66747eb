// groupsgdd --serve: one long-running daemon hosting any number of jobs (docs/jobs.md).
// The main thread runs the host loop: the job front on `listen` (job_front.cc: workers
// are sent to their job's coordinator), the control socket (job.* methods here, every
// other method forwarded to one job's coordinator), and the job table. Each job runs its
// coordinator on a thread of its own and its PSes on threads its Job owns.
// Thread rule: runJobHost() on the main thread; it returns when the daemon stops.
#pragma once

#include <atomic>
#include <optional>

#include <zmq.hpp>

#include "groupsgd/common/curve_keys.h"
#include "groupsgd/common/zap_handler.h"
#include "groupsgd/daemon/arbiter_host.h"
#include "groupsgd/daemon/config.h"
#include "groupsgd/jobs/serve_standby.h"

namespace groupsgd::jobs {

// The daemon configuration this room is built from (daemon/).
using daemon::ArbiterHost;
using daemon::DaemonConfig;

// Serves until stop is set (SIGINT/SIGTERM) or the control method shutdown arrives
// without a job; running jobs are then suspended (they resume at the next start).
// SIGHUP (reload turned true) and any job's reload-keys re-read the CURVE allow-list,
// node keys included: daemons is keys.daemons (CurveSetup::daemons; null without CURVE),
// replaced on each reload, so a `KEY node` line added or removed takes effect at once.
// Jobs keep their settings. arbiter: the daemon's device arbiter (arbiter_listen) or
// null; a job file's arbiter_weight is handed to it. takeover: a promoted --serve standby's
// (serve_standby.h): the replicated table is written to state_dir and each running job
// starts from its replica; the old primary (cfg.primary) is fenced. With
// replication_listen the daemon accepts a --serve standby there (docs/jobs.md,
// "Standby"). Returns the process exit code.
int runJobHost(zmq::context_t& ctx, const DaemonConfig& cfg, const CurveKeys& keys,
               const ZapHandler* zap, AllowList* daemons, const std::atomic<bool>& stop,
               std::atomic<bool>* reload, ArbiterHost* arbiter,
               std::optional<ServeTakeover> takeover = std::nullopt);

}  // namespace groupsgd::jobs
