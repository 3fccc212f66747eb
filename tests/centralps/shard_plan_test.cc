#include "groupsgd/centralps/shard_plan.h"

#include <doctest/doctest.h>

#include <vector>

#include "groupsgd/common/central_shard_map.h"
#include "groupsgd/kernels/model.h"

using namespace groupsgd;
using namespace groupsgd::centralps;

TEST_CASE("shard plan: a model's tensors, in layout order, cover it") {
  for (auto kind :
       {kernels::ModelKind::kMlp, kernels::ModelKind::kSoftmax, kernels::ModelKind::kCnn}) {
    const auto sizes = modelTensorSizes(kind);
    std::size_t total = 0;
    for (auto s : sizes) total += s;
    CHECK(total == kernels::makeModel(kind)->paramCount());
  }
  CHECK(modelTensorSizes(kernels::ModelKind::kMlp) ==
        std::vector<std::size_t>{256 * 784, 256, 128 * 256, 128, 10 * 128, 10});
}

TEST_CASE("shard plan: ranges on tensor boundaries, balanced by bytes, every shard non-empty") {
  const std::vector<std::size_t> equal = {100, 100, 100, 100};
  auto two = planShards(equal, 2);
  REQUIRE(two.isOk());
  REQUIRE(two->size() == 2);
  CHECK((*two)[0].begin == 0);
  CHECK((*two)[0].end == 200);
  CHECK((*two)[1].end == 400);
  auto four = planShards(equal, 4);
  REQUIRE(four.isOk());
  for (std::size_t k = 0; k < 4; ++k) CHECK((*four)[k].end - (*four)[k].begin == 100);
  // One huge tensor first: it is a shard of its own, the rest share what is left, and the
  // later shards still get one tensor each.
  auto skewed = planShards(std::vector<std::size_t>{1000, 1, 1, 1}, 3);
  REQUIRE(skewed.isOk());
  CHECK((*skewed)[0].end == 1000);
  CHECK((*skewed)[1].end == 1001);
  CHECK((*skewed)[2].end == 1003);
  // The boundary nearest the byte target: 60|40 is nearer half than 30|70.
  auto nearest = planShards(std::vector<std::size_t>{30, 30, 40}, 2);
  REQUIRE(nearest.isOk());
  CHECK((*nearest)[0].end == 60);
}

TEST_CASE("shard plan: more shards than tensors, or none, is an error") {
  auto too_many = planShards(modelTensorSizes(kernels::ModelKind::kMlp), 7);
  REQUIRE_FALSE(too_many.isOk());
  CHECK(too_many.status().message().find("exceeds the model's 6 tensors") != std::string::npos);
  CHECK_FALSE(planShards(std::vector<std::size_t>{1, 2}, 0).isOk());
}

TEST_CASE("shard plan: ranges seen from inside a shard are clipped and shifted") {
  const std::vector<kernels::ElementRange> biases = {{10, 20}, {50, 55}};
  CHECK(rangesWithin(biases, {15, 52}) == std::vector<kernels::ElementRange>{{0, 5}, {35, 37}});
  CHECK(rangesWithin(biases, {20, 50}).empty());
}

TEST_CASE("central shard map: one endpoint is one shard; a map round-trips and is checked") {
  auto one = parseCentralShards("tcp://h:1", 42);
  REQUIRE(one.isOk());
  REQUIRE(one->size() == 1);
  CHECK((*one)[0].end == 42);
  CHECK(formatCentralShards(*one) == "tcp://h:1");
  const std::vector<CentralShard> shards = {{"tcp://a:1", 0, 10}, {"tcp://b:2", 10, 42}};
  const std::string text = formatCentralShards(shards);
  CHECK(isCentralShardMap(text));
  auto back = parseCentralShards(text, 42);
  REQUIRE(back.isOk());
  REQUIRE(back->size() == 2);
  CHECK((*back)[1].endpoint == "tcp://b:2");
  CHECK((*back)[1].begin == 10);
  CHECK_FALSE(parseCentralShards(text, 43).isOk());  // short of the model
  CHECK_FALSE(parseCentralShards("shards:0-10@tcp://a:1,11-42@x", 42).isOk());  // a gap
  CHECK_FALSE(parseCentralShards("shards:0-10tcp://a:1", 10).isOk());           // no '@'
  CHECK_FALSE(parseCentralShards("shards:0-0@a,0-10@b", 10).isOk());            // empty range
  CHECK_FALSE(parseCentralShards("", 10).isOk());
}

TEST_CASE("central shard map: a shard's failover list keeps its order; an empty entry is refused") {
  auto map = parseCentralShards("shards:0-10@tcp://a:1,10-42@tcp://b:2|tcp://c:3", 42);
  REQUIRE(map.isOk());
  CHECK((*map)[0].alternatives() == std::vector<std::string>{"tcp://a:1"});
  CHECK((*map)[1].alternatives() == std::vector<std::string>{"tcp://b:2", "tcp://c:3"});
  CHECK(formatCentralShards(*map) == "shards:0-10@tcp://a:1,10-42@tcp://b:2|tcp://c:3");
  auto empty = parseCentralShards("shards:0-10@tcp://a:1,10-42@tcp://b:2|", 42);
  REQUIRE_FALSE(empty.isOk());
  CHECK(empty.status().message().find("empty endpoint in its failover list") != std::string::npos);
}

TEST_CASE("shard plan: even split cuts equal element ranges, inside tensors") {
  auto even = planEvenShards(10, 3);
  REQUIRE(even.isOk());
  REQUIRE(even->size() == 3);
  CHECK((*even)[0].end == 4);
  CHECK((*even)[1].begin == 4);
  CHECK((*even)[1].end == 7);
  CHECK((*even)[2].end == 10);
  CHECK_FALSE(planEvenShards(2, 3).isOk());
  CHECK_FALSE(planEvenShards(5, 0).isOk());
}
