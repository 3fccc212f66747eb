// PendingCalls: background calls whose continuations run on the owner's thread, at pump().
#include "groupsgd/coordinator/pending_calls.h"

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "support/fake_server.h"

using namespace groupsgd;
using namespace std::chrono;
using coordinator::PendingCalls;

namespace {

OutMessage statsQuery() {
  OutMessage out(1, 0);
  out.header().getBody().initCentralStatsQuery();
  return out;
}

// Pumps until nothing of `kind` is out or the deadline passes.
void pumpUntilDone(PendingCalls& calls, const std::string& kind, milliseconds limit) {
  const auto until = steady_clock::now() + limit;
  while (calls.inFlight(kind) && steady_clock::now() < until) {
    calls.pump();
    std::this_thread::sleep_for(milliseconds(2));  // a loop pass, as the coordinator's
  }
}

}  // namespace

TEST_CASE("pending calls: a continuation runs at pump(), on the caller's thread, with the reply") {
  zmq::context_t ctx;
  testing::FakeServer server(ctx, [](const InMessage&) {
    OutMessage out(1, 0);
    out.header().getBody().initCentralStats().setVersion(42);
    return testing::FakeServer::Reply{std::move(out), milliseconds(50)};
  });
  PendingCalls calls(ctx, MessageLimits{});
  std::vector<std::uint64_t> versions;
  const auto caller = std::this_thread::get_id();
  calls.start("stats", {server.endpoint(), {}}, statsQuery(), milliseconds(2000),
              [&](Result<InMessage> reply) {
                CHECK(std::this_thread::get_id() == caller);
                REQUIRE(reply.isOk());
                versions.push_back(reply->header().getBody().getCentralStats().getVersion());
              });
  CHECK(calls.inFlight("stats"));
  CHECK_FALSE(calls.inFlight("flush"));
  calls.pump();  // the server waits 50 ms: nothing to run yet
  CHECK(versions.empty());
  pumpUntilDone(calls, "stats", milliseconds(3000));
  CHECK(versions == std::vector<std::uint64_t>{42});
  CHECK(calls.size() == 0);
}

TEST_CASE("pending calls: a silent server fails its call at the timeout; others are not held up") {
  zmq::context_t ctx;
  testing::FakeServer silent(ctx, [](const InMessage&) { return testing::FakeServer::Reply{}; });
  testing::FakeServer quick(ctx, [](const InMessage&) {
    OutMessage out(1, 0);
    out.header().getBody().initCentralStats().setVersion(7);
    return testing::FakeServer::Reply{std::move(out)};
  });
  PendingCalls calls(ctx, MessageLimits{});
  std::vector<std::string> order;
  const auto started = steady_clock::now();
  calls.start("flush", {silent.endpoint(), {}}, statsQuery(), milliseconds(300),
              [&](Result<InMessage> reply) {
                CHECK_FALSE(reply.isOk());
                order.push_back("silent");
              });
  calls.start("flush", {quick.endpoint(), {}}, statsQuery(), milliseconds(3000),
              [&](Result<InMessage> reply) {
                CHECK(reply.isOk());
                order.push_back("quick");
              });
  pumpUntilDone(calls, "flush", milliseconds(5000));
  CHECK(order == std::vector<std::string>{"quick", "silent"});
  CHECK(steady_clock::now() - started >= milliseconds(300));
}

TEST_CASE(
    "pending calls: finish() waits for its kind only; a continuation may start another call") {
  zmq::context_t ctx;
  testing::FakeServer server(ctx, [](const InMessage&) {
    OutMessage out(1, 0);
    out.header().getBody().initCentralStats();
    return testing::FakeServer::Reply{std::move(out), milliseconds(100)};
  });
  PendingCalls calls(ctx, MessageLimits{});
  int checkpoints = 0, polls = 0;
  calls.start("poll", {server.endpoint(), {}}, statsQuery(), milliseconds(3000),
              [&](Result<InMessage>) { ++polls; });
  calls.start("checkpoint", {server.endpoint(), {}}, statsQuery(), milliseconds(3000),
              [&](Result<InMessage>) {
                ++checkpoints;
                calls.start("poll", {server.endpoint(), {}}, statsQuery(), milliseconds(3000),
                            [&](Result<InMessage>) { ++polls; });
              });
  calls.finish("checkpoint");
  CHECK(checkpoints == 1);
  CHECK(calls.inFlight("poll"));  // started by the continuation, or not yet pumped
  pumpUntilDone(calls, "poll", milliseconds(3000));
  CHECK(polls == 2);
}
