// The node daemons of a multi-job daemon and their slots (node_pool.h).
#include "groupsgd/jobs/node_pool.h"

#include <doctest/doctest.h>

#include <thread>

using groupsgd::jobs::NodePool;

TEST_CASE("node pool: jobs take slots from the node with the most free and give them back") {
  NodePool pool;
  CHECK(pool.place(1, 1) == 0);  // no node yet
  const auto a = pool.add("hostA", "a", "", 1);
  const auto b = pool.add("hostB", "b", "", 3);
  CHECK(a >= NodePool::kFirstId);
  CHECK(pool.total() == 4);
  CHECK(pool.free() == 4);
  // Job 1 takes two: both from b (3 free, then 2 against a's 1).
  CHECK(pool.place(1, 2) == 2);
  CHECK(pool.find(b)->placed.at(1) == 2);
  CHECK(pool.find(a)->placed.count(1) == 0);
  // Job 2 wants three: one left on each node, the lowest id first on ties; one short.
  CHECK(pool.place(2, 3) == 2);
  CHECK(pool.placed(2) == 2);
  CHECK(pool.free() == 0);
  CHECK(pool.inUse() == 4);
  pool.release(1);
  CHECK(pool.free() == 2);
  CHECK(pool.placed(1) == 0);
  CHECK(pool.place(3, 2) == 2);
  CHECK(pool.find(b)->placed.at(3) == 2);
}

TEST_CASE("node pool: a silent node is dropped with its slots; an unknown node is not seen") {
  NodePool pool;
  const auto a = pool.add("hostA", "a", "KEY", 2);
  CHECK(pool.place(7, 2) == 2);
  CHECK(pool.seen(a));
  CHECK_FALSE(pool.seen(a + 1));
  CHECK(pool.expire(std::chrono::seconds(10)).empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the silence under test
  const auto gone = pool.expire(std::chrono::milliseconds(5));
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].find("hostA") != std::string::npos);
  CHECK(pool.placed(7) == 0);
  CHECK(pool.total() == 0);
  CHECK_FALSE(pool.seen(a));
}
