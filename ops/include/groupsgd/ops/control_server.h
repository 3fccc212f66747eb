// The control socket: a Unix domain stream socket speaking JSON Lines (the protocol is in
// control_protocol.h and docs/operations.md), served by Boost.Asio on a thread the
// server owns. The server decodes and checks requests; it never touches coordinator
// state. Valid requests go into a queue that the coordinator thread drains.
//
// What the server answers by itself (the request never reaches the queue):
//   parse_error, invalid_request, method_not_found (method not in options.methods),
//   invalid_params (params present but not an object), too_large (line over
//   max_request_bytes; the rest of the line is discarded), permission_denied (admin
//   method, non-admin caller), refused (queue full, too many connections, or refusing()
//   set for shutdown). Every error leaves the connection usable.
// One request per connection is in flight at a time: the server reads a connection's
// next line only after the reply to the previous one has been queued for writing, so
// replies come back in request order and a slow method stalls only its own connection.
//
// Startup: an existing socket file at `path` is replaced only if nothing answers a
// connect on it (a stale file from a crashed daemon); if something answers, start()
// fails ("another daemon is serving"). A path that exists and is not a socket is never
// removed. The file gets `mode` (default 0660) by chmod after bind and before listen, so
// no client can connect while the umask-derived mode is in place. The destructor removes
// the file if it is still the one this server created.
//
// Coordinator integration (its loop polls ZeroMQ with a 50 ms timeout):
//   while (auto req = control->tryPop()) handleControl(std::move(*req));
// once per loop iteration, or add wakeFd() to the zmq poll items (ZMQ_POLLIN on a raw
// fd) to wake at once. A PendingRequest is answered exactly once with respond() or
// fail(); it may be kept and answered in a later iteration (drain --wait). One dropped
// without an answer replies "internal" by itself. respond()/fail() only post the reply to
// the server thread; they never block on the socket.
//
// Thread rule: start() and the destructor on the owning thread; tryPop()/waitPop()/
// setRefusing() on any thread (meant: the coordinator thread); PendingRequest on any one
// thread at a time. The server's own work runs on its thread; nothing there blocks.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "groupsgd/common/status.h"
#include "groupsgd/ops/control_protocol.h"

namespace groupsgd::ops {

class MetricsRegistry;

// uid 0 and this process's effective uid.
std::vector<uid_t> defaultAdminUids();

struct ControlServerOptions {
  std::string path;                                        // socket file (at most 107 bytes)
  mode_t mode = 0660;                                      // set by chmod after bind
  std::size_t max_request_bytes = std::size_t{64} * 1024;  // longest request line, '\n' excluded
  std::size_t max_connections = 64;                        // more are answered "refused" and closed
  std::size_t max_pending = 256;  // queued for the coordinator; more: "refused"
  std::vector<ControlMethod> methods = defaultControlMethods();
  // Who may call admin methods: these uids (root and the daemon's own effective uid: the
  // service manager and whoever started it) and the members of admin_gid.
  std::vector<uid_t> admin_uids = defaultAdminUids();
  std::optional<gid_t> admin_gid;  // primary or supplementary group of the caller
  // Optional: counts groupsgd_control_requests_total{method,code} and the gauge
  // groupsgd_control_connections. Borrowed; must outlive the server.
  MetricsRegistry* metrics = nullptr;
};

// May this caller use admin methods under these options?
bool isAdminCaller(const Caller& caller, const ControlServerOptions& options);

// One request waiting for the coordinator's answer. Move-only.
class PendingRequest {
 public:
  using Deliver = std::function<void(nlohmann::ordered_json reply)>;
  // deliver: where the reply goes (the server builds it; tests may pass their own).
  PendingRequest(ControlRequest request, Deliver deliver);
  PendingRequest(PendingRequest&&) noexcept;
  PendingRequest& operator=(PendingRequest&&) noexcept;
  PendingRequest(const PendingRequest&) = delete;
  PendingRequest& operator=(const PendingRequest&) = delete;
  // Unanswered: replies {"code": "internal", "message": "dropped without a reply"}.
  ~PendingRequest();

  const ControlRequest& request() const { return request_; }
  const std::string& method() const { return request_.method; }
  const nlohmann::json& params() const { return request_.params; }
  const Caller& caller() const { return request_.caller; }

  // Answers {"ok": true, "result": result}. A second answer is ignored. Build the result
  // as an ordered_json to fix the key order groupsgdctl shows (a json converts).
  void respond(nlohmann::ordered_json result);
  // Answers {"ok": false, "error": {code, message}}.
  void fail(ControlError code, std::string_view message);
  // Answers with controlErrorFor(status.code()) and status.message(); status must not be ok.
  void fail(const Status& status);
  bool answered() const { return !deliver_; }

 private:
  void send(nlohmann::ordered_json reply);
  ControlRequest request_;
  Deliver deliver_;  // empty once answered
};

// Where a coordinator takes its control requests from: the control server itself, or
// (a daemon hosting several jobs) the queue of the one job they were sent to.
class ControlQueue {
 public:
  virtual ~ControlQueue() = default;
  virtual std::optional<PendingRequest> tryPop() = 0;
  // With a reason, requests are answered "refused" with it instead of being queued.
  virtual void setRefusing(std::optional<std::string> reason) = 0;
};

class ControlServer : public ControlQueue {
 public:
  // Takes over the socket path (see above), binds, chmods, listens, starts the thread.
  static Result<std::unique_ptr<ControlServer>> start(ControlServerOptions options);
  // Closes every connection, stops the thread, removes the socket file. Requests still
  // queued or held by the coordinator get no reply (their connections are gone).
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  const std::string& path() const;

  // The next queued request, if any. Never blocks.
  std::optional<PendingRequest> tryPop() override;
  // Waits up to timeout for a request (for simple loops and tests).
  std::optional<PendingRequest> waitPop(std::chrono::milliseconds timeout);
  // An eventfd that is readable while requests are queued (level-triggered; tryPop()
  // resets it when the queue empties). Owned by the server; do not read or close it.
  int wakeFd() const;

  // With a reason, new requests are answered "refused" with it (e.g. "shutting down")
  // instead of being queued; nullopt accepts again.
  void setRefusing(std::optional<std::string> reason) override;

  struct Impl;

 private:
  explicit ControlServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace groupsgd::ops
