// Background calls with their continuations: each request to a server runs on a thread of
// its own (background_call.h) and, once its reply or its failure is in, its continuation
// runs on the owner's thread, from pump(). The coordinator's loop pumps every pass, so no
// server it asks (a checkpoint, a poll, a flush, the central PS's counters) can stall it.
// Thread rule: every method on the owning (coordinator) thread; continuations run there.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "groupsgd/common/message.h"
#include "groupsgd/coordinator/background_call.h"

namespace groupsgd::coordinator {

class PendingCalls {
 public:
  using Continuation = std::function<void(Result<InMessage>)>;

  // ctx must outlive this object (its destructor waits for the calls still out).
  PendingCalls(zmq::context_t& ctx, MessageLimits limits) : ctx_(ctx), limits_(limits) {}

  // Sends msg to target on a thread of its own; `then` hears the reply (or why there is
  // none: the timeout, a refusal) at a later pump(). kind names the call for inFlight().
  void start(std::string kind, CallTarget target, OutMessage&& msg,
             std::chrono::milliseconds timeout, Continuation then);
  // Whether a call of this kind is still out (one poll at a time, one stats question).
  bool inFlight(const std::string& kind) const;
  std::size_t size() const { return calls_.size(); }
  // Runs the continuations of the calls that have returned, in the order they were
  // started; a continuation may start new calls (they are pumped next time).
  void pump();
  // Waits for every call out of this kind (each ends by its own timeout) and runs their
  // continuations: for the end of a run, when nothing else is left to serve.
  void finish(const std::string& kind);

 private:
  struct Call {
    std::string kind;
    BackgroundCall call;
    Continuation then;
  };
  void runReady(bool wait, const std::string* kind);

  zmq::context_t& ctx_;
  MessageLimits limits_;
  std::vector<Call> calls_;
};

}  // namespace groupsgd::coordinator
