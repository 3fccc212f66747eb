// The metrics endpoint: a minimal HTTP/1.1 server (Boost.Beast) that answers
// GET /metrics (and HEAD) with MetricsRegistry::render() for Prometheus to scrape.
// With a DashboardBoard it also serves the dashboard (docs/operations.md "Watching a
// run"): the page at / (its script and style at /dashboard.js, /dashboard.css, compiled
// in) and its data at /api/state (DashboardBoard::stateJson(), never cached). All of it
// is read-only: GET and HEAD only.
// Anything else is 404 Not Found (405 for another method on a known path). Keep-alive is
// honoured; every connection has a 10 s deadline per request and an 8 KiB header cap.
// Thread rule: start() and the destructor on the owning thread; the server runs its own
// io_context on its own thread, which only reads the registry (under its mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "groupsgd/common/status.h"
#include "groupsgd/ops/dashboard_board.h"
#include "groupsgd/ops/metrics.h"

namespace groupsgd::ops {

struct MetricsServerOptions {
  std::string host = "127.0.0.1";  // an IPv4 or IPv6 literal; keep it on loopback
  std::uint16_t port = 0;          // 0: the kernel chooses; read port() back
  // Borrowed; must outlive the server. Null: no dashboard (/ is 404).
  const DashboardBoard* dashboard = nullptr;
};

class MetricsServer {
 public:
  // Binds and starts serving. registry is borrowed and must outlive the server.
  static Result<std::unique_ptr<MetricsServer>> start(const MetricsRegistry& registry,
                                                      const MetricsServerOptions& options);
  // Stops the thread and closes every connection.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  std::uint16_t port() const;  // the bound port
  const std::string& host() const;

  struct Impl;

 private:
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace groupsgd::ops
