// One request to a server, made on a thread of its own with a socket of its own, so the
// coordinator's loop keeps reading heartbeats and pinging the watchdog while a slow
// answer (a checkpoint: up to 60 s) is on its way.
// Thread rule: start(), ready() and take() on the owning (coordinator) thread; the call
// itself runs on its own thread and shares nothing with the caller but the result.
#pragma once

#include <chrono>
#include <future>
#include <string>

#include <zmq.hpp>

#include "groupsgd/common/message.h"
#include "groupsgd/common/transport.h"

namespace groupsgd::coordinator {

// Where a call goes: a server's endpoint and the socket options to reach it (its keys).
struct CallTarget {
  std::string endpoint;
  SocketOptions options;
};

class BackgroundCall {
 public:
  // Sends msg to the target and waits up to timeout for the reply, on a new thread. ctx
  // must outlive the call (take() or the destructor, which waits for it).
  static BackgroundCall start(zmq::context_t& ctx, CallTarget target, MessageLimits limits,
                              OutMessage&& msg, std::chrono::milliseconds timeout);
  BackgroundCall(BackgroundCall&&) = default;
  BackgroundCall& operator=(BackgroundCall&&) = default;

  bool ready() const;
  // The reply, or why there is none; call once, after ready().
  Result<InMessage> take();

 private:
  explicit BackgroundCall(std::future<Result<InMessage>> reply) : reply_(std::move(reply)) {}
  std::future<Result<InMessage>> reply_;
};

}  // namespace groupsgd::coordinator
