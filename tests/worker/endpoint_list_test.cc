// The head endpoint list of workers and node daemons: parsing, and the
// coordinator client moving on to the next endpoint when one stays silent.
#include "groupsgd/client/endpoint_list.h"

#include <doctest/doctest.h>

#include <atomic>

#include "groupsgd/client/client.h"
#include "groupsgd/common/message.h"
#include "groupsgd/worker/options.h"
#include "support/fake_server.h"

using namespace groupsgd;
using namespace groupsgd::client;
using namespace groupsgd::worker;

TEST_CASE("endpoint list: one endpoint or a comma-separated list, blanks trimmed") {
  auto one = EndpointList::parse("tcp://127.0.0.1:5555");
  REQUIRE(one.isOk());
  CHECK(one->size() == 1);
  CHECK(one->current() == "tcp://127.0.0.1:5555");
  CHECK(one->advance() == "tcp://127.0.0.1:5555");
  auto two = EndpointList::parse("tcp://head-a:5555, tcp://head-b:6000 ");
  REQUIRE(two.isOk());
  CHECK(two->all() == std::vector<std::string>{"tcp://head-a:5555", "tcp://head-b:6000"});
  CHECK(two->advance() == "tcp://head-b:6000");
  CHECK(two->advance() == "tcp://head-a:5555");
}

TEST_CASE("endpoint list: bad lists are refused with the reason") {
  for (const char* bad : {"", ",", "tcp://a:1,", "tcp://a:1,,tcp://b:2", " , tcp://a:1"}) {
    auto r = EndpointList::parse(bad);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().message().find("empty entry") != std::string::npos);
  }
  auto no_transport = EndpointList::parse("tcp://a:1,head-b:5555");
  REQUIRE_FALSE(no_transport.isOk());
  CHECK(no_transport.status().message().find("'head-b:5555' has no transport") !=
        std::string::npos);
  auto opt = parseWorkerOptions({"--coordinator", "tcp://a:1,,tcp://b:2"});
  REQUIRE_FALSE(opt.isOk());
  CHECK(opt.status().message().find("empty entry") != std::string::npos);
  CHECK(parseWorkerOptions({"--coordinator", "tcp://a:1,tcp://b:2"}).isOk());
}

TEST_CASE(
    "coordinator client: a silent endpoint sends the next call to the "
    "next one") {
  zmq::context_t ctx(1);
  // Nothing listens on these ports (the kernel refuses; ZeroMQ keeps retrying
  // silently).
  CoordinatorClient coord(ctx, "tcp://127.0.0.1:1,tcp://127.0.0.1:2", 0,
                          std::chrono::milliseconds(100));
  CHECK(coord.endpoint() == "tcp://127.0.0.1:1");
  auto first = coord.registerAs(Role::kTrainer, "w");
  REQUIRE_FALSE(first.isOk());
  CHECK(first.status().code() == Code::kUnavailable);
  CHECK(coord.endpoint() == "tcp://127.0.0.1:2");
  CHECK_FALSE(coord.registerAs(Role::kTrainer, "w").isOk());
  CHECK(coord.endpoint() == "tcp://127.0.0.1:1");
  // A single endpoint stays put.
  CoordinatorClient single(ctx, "tcp://127.0.0.1:1", 0, std::chrono::milliseconds(100));
  CHECK_FALSE(single.registerAs(Role::kTrainer, "w").isOk());
  CHECK(single.endpoint() == "tcp://127.0.0.1:1");
}

namespace {

// A coordinator stand-in that answers a registration with an assignment of epoch
// incarnation << 32 | 1 while `answering` holds (and never otherwise).
struct FakeHead {
  std::atomic<bool> answering{true};
  std::uint64_t incarnation;
  testing::FakeServer server;
  FakeHead(zmq::context_t& ctx, std::uint64_t inc)
      : incarnation(inc), server(ctx, [this](const InMessage&) {
          testing::FakeServer::Reply r;
          if (!answering.load()) return r;
          OutMessage out(1, 0);  // job 1: the FakeServer's default limits
          out.header().setEpoch((incarnation << 32) | 1);
          auto a = out.header().getBody().initAssignment();
          a.setWorkerId(7);
          a.setShardCount(1);
          r.message = std::move(out);
          return r;
        }) {}
};

}  // namespace

TEST_CASE(
    "coordinator client: a head of an older incarnation than one it followed (a superseded "
    "primary still running) is refused, and the next call tries the next endpoint") {
  zmq::context_t ctx(1);
  FakeHead promoted(ctx, 6), old_primary(ctx, 5);
  CoordinatorClient coord(ctx, promoted.server.endpoint() + "," + old_primary.server.endpoint(), 1,
                          std::chrono::milliseconds(300));
  auto first = coord.registerAs(Role::kTrainer, "w");
  REQUIRE_MESSAGE(first.isOk(), first.status().toString());
  CHECK((first->epoch >> 32) == 6);
  // The promoted head falls silent: the client moves on and finds the old primary.
  promoted.answering.store(false);
  CHECK_FALSE(coord.registerAs(Role::kTrainer, "w").isOk());
  CHECK(coord.endpoint() == old_primary.server.endpoint());
  auto refused = coord.registerAs(Role::kTrainer, "w");
  REQUIRE_FALSE(refused.isOk());
  CHECK(refused.status().message().find("superseded head") != std::string::npos);
  CHECK(coord.endpoint() == promoted.server.endpoint());
  // Back: accepted again; a newer incarnation is always accepted.
  promoted.answering.store(true);
  CHECK(coord.registerAs(Role::kTrainer, "w").isOk());
  old_primary.incarnation = 7;
  promoted.answering.store(false);
  CHECK_FALSE(coord.registerAs(Role::kTrainer, "w").isOk());
  CHECK(coord.registerAs(Role::kTrainer, "w").isOk());
}
