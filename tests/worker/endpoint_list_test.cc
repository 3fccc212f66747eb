// The head endpoint list of workers and node daemons: parsing, and the
// coordinator client moving on to the next endpoint when one stays silent.
#include "groupsgd/client/endpoint_list.h"

#include <doctest/doctest.h>

#include "groupsgd/client/client.h"
#include "groupsgd/worker/options.h"

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
