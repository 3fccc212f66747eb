// Helpers shared by the fault process tests (label `faults`): a daemon with its
// control socket, summary and endpoint file in one directory, groupsgdctl
// calls, log timestamps.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "process.h"

namespace groupsgd::testing {

// Seconds since the epoch (the clock log lines are stamped with).
double wallNow();
// The log timestamp of the first line holding `text` at or after byte `from`;
// -1 if none.
double stampOf(const std::string &log, const std::string &text,
               std::size_t from = 0);
// The endpoint the daemon wrote into dir/endpoint.
std::string endpointIn(const std::string &dir);
// groupsgdd with --listen, --endpoint-file dir/endpoint, --control-socket
// dir/ctl.sock,
// --summary-file dir/summary.json and `extra`; waits until the endpoint file is
// written.
std::unique_ptr<Process> startDaemon(const std::string &dir,
                                     const std::string &log,
                                     const std::string &listen,
                                     std::vector<std::string> extra);
// groupsgdctl --json ARGS against dir/ctl.sock, parsed; null when the daemon
// does not answer.
nlohmann::json ctl(const std::string &dir, std::vector<std::string> args);
// Polls `status` until pred(status) holds or the timeout passes; returns the
// last status.
template <typename Pred>
nlohmann::json waitForStatus(const std::string &dir, Pred pred,
                             std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  nlohmann::json st;
  while (std::chrono::steady_clock::now() < deadline) {
    st = ctl(dir, {"status"});
    if (st.is_object() && pred(st))
      return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return st;
}

// Checks trained == applied + dropped, nothing unaccounted, accounting_ok.
void checkAccounting(const nlohmann::json &summary);

} // namespace groupsgd::testing
