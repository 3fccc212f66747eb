#include "groupsgd/common/interrupt.h"

#include <doctest/doctest.h>

#include <chrono>

#include "groupsgd/common/transport.h"

using namespace groupsgd;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST_CASE("interrupt: without a check nothing is interrupted; a check is per scope") {
  CHECK_FALSE(interruptCheckInstalled());
  CHECK_FALSE(interruptRequested());
  CHECK(interruptibleSleep(1ms).isOk());
  {
    ScopedInterruptCheck outer([] { return false; });
    CHECK(interruptCheckInstalled());
    CHECK_FALSE(interruptRequested());
    {
      ScopedInterruptCheck inner([] { return true; });
      CHECK(interruptRequested());
    }
    CHECK_FALSE(interruptRequested());  // the outer one again
  }
  CHECK_FALSE(interruptCheckInstalled());
}

TEST_CASE("interrupt: a long sleep ends within a slice of the check saying so") {
  const auto t0 = Clock::now();
  ScopedInterruptCheck check([t0] { return Clock::now() - t0 > 100ms; });
  const Status s = interruptibleSleep(60s);
  CHECK(isInterrupted(s));
  CHECK(Clock::now() - t0 < 100ms + 10 * kInterruptSlice);
}

TEST_CASE("interrupt: an RPC waiting for a peer that never answers returns 'interrupted'") {
  zmq::context_t ctx(1);
  // A ROUTER that reads nothing: the request is queued, no answer ever comes.
  zmq::socket_t silent(ctx, zmq::socket_type::router);
  auto endpoint = bindSocket(silent, "tcp://127.0.0.1:0");
  REQUIRE(endpoint.isOk());
  RpcClient rpc(ctx, *endpoint, MessageLimits{});
  const auto t0 = Clock::now();
  ScopedInterruptCheck check([t0] { return Clock::now() - t0 > 100ms; });
  OutMessage msg(1, 1);
  msg.header().getBody().initFetch();
  auto r = rpc.call(std::move(msg), std::chrono::milliseconds(60000));
  CHECK(isInterrupted(r.status()));
  CHECK(Clock::now() - t0 < 100ms + 10 * kInterruptSlice);
}
