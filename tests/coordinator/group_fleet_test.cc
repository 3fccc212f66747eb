// The coordinator's group PS slots: filled in order, failed and re-pointed at a spare.
#include "groupsgd/coordinator/group_fleet.h"

#include <doctest/doctest.h>

using namespace groupsgd;
using coordinator::GroupFleet;

TEST_CASE("group fleet: slots fill in order, fail, and move to a spare") {
  zmq::context_t ctx(1);
  GroupFleet fleet(ctx, MessageLimits{}, 3, 4);
  CHECK(fleet.slots() == 3);
  CHECK(fleet.ready() == 0);
  CHECK_FALSE(fleet.allReady());
  CHECK(fleet.endpoint(0).empty());  // no PS yet
  CHECK(fleet.period(2) == 4);

  CHECK(fleet.add("tcp://127.0.0.1:7001", {}, 0) == 0);
  CHECK(fleet.add("tcp://127.0.0.1:7002", {}, 11) == 1);
  CHECK(fleet.add("tcp://127.0.0.1:7003", {}, 12) == 2);
  CHECK(fleet.allReady());
  CHECK(fleet.endpoint(1) == "tcp://127.0.0.1:7002");
  CHECK(fleet.node(0) == 0);  // this daemon's own
  CHECK(fleet.node(2) == 12);
  CHECK(fleet.link(2).endpoint == "tcp://127.0.0.1:7003");
  CHECK(fleet.endpoint(7).empty());  // out of range: none
  CHECK(fleet.node(7) == 0);
  CHECK_FALSE(fleet.failed(7));

  fleet.setPeriod(1, 8);
  CHECK(fleet.period(1) == 8);
  fleet.markFailed(1);
  fleet.markFailed(2);
  CHECK(fleet.failed(1));
  CHECK(fleet.failedGroups() == std::vector<std::uint32_t>{1, 2});

  fleet.replace(1, "tcp://127.0.0.1:7009", {}, 12);  // a spare on node 12
  CHECK_FALSE(fleet.failed(1));
  CHECK(fleet.endpoint(1) == "tcp://127.0.0.1:7009");
  CHECK(fleet.client(1).endpoint() == "tcp://127.0.0.1:7009");
  CHECK(fleet.node(1) == 12);
  CHECK(fleet.period(1) == 8);  // the group keeps its K
  CHECK(fleet.failedGroups() == std::vector<std::uint32_t>{2});
}
