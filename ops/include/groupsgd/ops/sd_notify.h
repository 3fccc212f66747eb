// A tiny implementation of systemd's readiness protocol (sd_notify(3)), without
// libsystemd: one datagram per call to the AF_UNIX socket named by $NOTIFY_SOCKET (a
// path, or an abstract name written with a leading '@'). Every call is a no-op returning
// ok when NOTIFY_SOCKET is unset, so the daemon behaves the same outside systemd.
//
// How groupsgdd uses it (Type=notify, see scripts/systemd/groupsgdd.service):
//   READY=1 once every socket is bound and state (checkpoint) is loaded; STATUS=... lines
//   for `systemctl status`; WATCHDOG=1 from the main loop every sdWatchdogInterval()/2;
//   RELOADING=1 on SIGHUP, then READY=1 after the reload; STOPPING=1 on shutdown.
// Thread rule: any thread; each call opens, uses and closes its own socket.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "groupsgd/common/status.h"

namespace groupsgd::ops {

// Sends `state` (newline-separated KEY=VALUE assignments) as one datagram. Ok and no-op
// when NOTIFY_SOCKET is unset or empty; an error when it is set but unusable.
Status sdNotify(std::string_view state);

// READY=1, with a STATUS= line when status is not empty.
Status sdNotifyReady(std::string_view status = {});
// STATUS=<status> (newlines are replaced by spaces).
Status sdNotifyStatus(std::string_view status);
// WATCHDOG=1: the main loop is alive.
Status sdNotifyWatchdog();
// STOPPING=1: shutdown has begun.
Status sdNotifyStopping();
// RELOADING=1 with MONOTONIC_USEC=<CLOCK_MONOTONIC now> (systemd >= 253 wants it);
// send sdNotifyReady() when the reload is done.
Status sdNotifyReloading();

// The watchdog interval systemd expects pings within (WATCHDOG_USEC), or nullopt when
// the watchdog is off: WATCHDOG_USEC unset, not a positive integer, or WATCHDOG_PID set
// to another process. Ping at half of it.
std::optional<std::chrono::microseconds> sdWatchdogInterval();

}  // namespace groupsgd::ops
