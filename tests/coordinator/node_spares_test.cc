// Spare group PS slots offered by node daemons (node_spares.h).
#include "groupsgd/coordinator/node_spares.h"

#include <doctest/doctest.h>

using groupsgd::coordinator::NodeSpares;

TEST_CASE("a spare is taken from the node with the most free slots; a dead node's go with it") {
  NodeSpares s;
  CHECK_FALSE(s.take().has_value());
  s.offer(7, "tcp://a:1");
  s.offer(9, "tcp://b:1");
  s.offer(9, "tcp://b:2");
  CHECK(s.count() == 3);
  auto first = s.take();
  REQUIRE(first.has_value());
  CHECK(first->node == 9);  // two free against one
  CHECK(first->endpoint == "tcp://b:1");
  // One each now: the lowest node id on ties.
  auto second = s.take();
  REQUIRE(second.has_value());
  CHECK(second->node == 7);
  s.dropNode(9);
  CHECK(s.count() == 0);
  CHECK(s.countOn(9) == 0);
  CHECK_FALSE(s.take().has_value());
}
