// What the process around a coordinator lends it, passed once at create(): the head's
// incarnation, and borrowed pieces that are all optional (each must outlive run()).
// A single run's main() fills the operations fields; a multi-job daemon also the job's
// flags; a unit test may leave all of them empty.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>

#include "groupsgd/common/allow_list.h"
#include "groupsgd/common/latest_text.h"
#include "groupsgd/common/status.h"
#include "groupsgd/common/zap_handler.h"
#include "groupsgd/coordinator/head_start.h"
#include "groupsgd/ops/control_server.h"
#include "groupsgd/ops/dashboard_board.h"
#include "groupsgd/ops/metrics.h"

namespace groupsgd::coordinator {

struct CoordinatorDeps {
  // The incarnation and what was resumed (default: a fresh first head).
  HeadStart head;
  // The control socket's request queue (null: no control socket).
  ops::ControlQueue* control = nullptr;
  // The metrics registry; every series the coordinator exports carries job="<job_name>".
  ops::MetricsRegistry* metrics = nullptr;
  // Where the job's view for the dashboard page goes, twice a second (null: no page).
  ops::DashboardBoard* dashboard = nullptr;
  // The systemd watchdog period (pinged from the loop at half of it).
  std::optional<std::chrono::microseconds> watchdog;
  // Set by SIGHUP: reload the configuration file (the coordinator clears it).
  std::atomic<bool>* reload = nullptr;
  // The ZAP handler whose counters status and /metrics report.
  const ZapHandler* zap = nullptr;
  // Re-reads the CURVE allow-list (SIGHUP and the reload_keys method); unset: CURVE off.
  std::function<Result<AllowListChange>()> reload_keys;
  // A job of a multi-job daemon (docs/jobs.md). stop_now: once set, a stop does not wait
  // for trainers to leave. suspend: run() returns {"suspended": true} at once, without
  // draining or flushing (the daemon is stopping; the job resumes from its checkpoint).
  const std::atomic<bool>* stop_now = nullptr;
  const std::atomic<bool>* suspend = nullptr;
  // A head with a standby: where its state for the standby goes, whenever it changed
  // (coordinator_state.cc; null: no standby).
  std::shared_ptr<LatestText> standby_state;
  // A promoted standby: the primary coordinator's last state it received (JSON; empty:
  // none), received followed_state_age_ms before the takeover. The epoch ledger and the
  // run log go on from it.
  std::string followed_state;
  std::uint64_t followed_state_age_ms = 0;
};

}  // namespace groupsgd::coordinator
