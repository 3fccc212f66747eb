// The ZAP handler (ZeroMQ RFC 27) that decides which CURVE clients a process admits.
// libzmq asks inproc://zeromq.zap.01 of the socket's context at every CURVE handshake;
// when nothing is bound there it admits ANY client that knows the server key. So the
// handler is started before any socket binds, and its death ends the process.
// An admitted client's messages carry its Z85 public key as the "User-Id" property
// (peerKey() below), which servers use as the sender's identity.
// Thread rule: start() and the destructor on the owner thread; the counters from any
// thread. The handler's socket lives on its own thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "groupsgd/common/allow_list.h"
#include "groupsgd/common/status.h"

namespace groupsgd {

inline constexpr const char* kZapDomain = "groupsgd";

class ZapHandler {
 public:
  // Called on the handler thread if it fails while running; the default prints one line
  // and exits the process (a CURVE server without its handler would admit anybody).
  using FatalHook = std::function<void(const std::string& why)>;

  // Binds inproc://zeromq.zap.01 in ctx (fails if another handler holds it) and starts
  // the thread. allowed: Z85 public keys admitted (replace() on the list takes effect at
  // the next handshake).
  static Result<std::unique_ptr<ZapHandler>> start(zmq::context_t& ctx,
                                                   std::shared_ptr<AllowList> allowed,
                                                   FatalHook on_fatal = {});
  static Result<std::unique_ptr<ZapHandler>> start(zmq::context_t& ctx,
                                                   std::set<std::string> allowed,
                                                   FatalHook on_fatal = {});
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  std::uint64_t admitted() const { return admitted_.load(); }
  std::uint64_t refused() const { return refused_.load(); }
  // The list this handler admits; the servers of the same process check it per message.
  const std::shared_ptr<AllowList>& allowList() const { return allowed_; }

 private:
  ZapHandler(zmq::socket_t sock, std::shared_ptr<AllowList> allowed, FatalHook on_fatal);
  void run();
  void answer(std::vector<zmq::message_t>& request);

  zmq::socket_t sock_;  // owned by the thread once it runs
  const std::shared_ptr<AllowList> allowed_;
  FatalHook on_fatal_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> admitted_{0};
  std::atomic<std::uint64_t> refused_{0};
  std::thread thread_;
};

// The Z85 public key the ZAP handler recorded for the connection a received frame came
// over, or "" (plain TCP, inproc, or no handler).
std::string peerKey(const zmq::message_t& frame);

}  // namespace groupsgd
