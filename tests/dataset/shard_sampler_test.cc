#include <doctest/doctest.h>

#include <vector>

#include "groupsgd/dataset/batch.h"

using namespace groupsgd::dataset;

namespace {

// Draws exactly one epoch of the shard in batches and counts how often each index appears.
std::vector<int> drawOneEpoch(ShardSampler& s, std::size_t dataset_size, std::size_t batch) {
  std::vector<int> seen(dataset_size, 0);
  std::vector<std::uint32_t> out;
  std::size_t drawn = 0;
  while (drawn < s.shardSize()) {
    const std::size_t want = std::min(batch, s.shardSize() - drawn);
    s.next(want, &out);
    REQUIRE(out.size() == want);
    for (std::uint32_t i : out) {
      REQUIRE(i < dataset_size);
      ++seen[i];
    }
    drawn += want;
  }
  return seen;
}

}  // namespace

TEST_CASE("shard sampler: every shard index once per epoch, shards disjoint and complete") {
  constexpr std::size_t kSize = 103, kShards = 4;
  std::vector<int> total(kSize, 0);
  for (std::size_t shard = 0; shard < kShards; ++shard) {
    ShardSampler s(kSize, shard, kShards, 42);
    CHECK(s.shardSize() == (kSize - shard + kShards - 1) / kShards);
    for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
      CHECK(s.epoch() == epoch);
      auto seen = drawOneEpoch(s, kSize, 7);
      for (std::size_t i = 0; i < kSize; ++i) {
        CHECK(seen[i] == (i % kShards == shard ? 1 : 0));
        if (epoch == 0) total[i] += seen[i];
      }
    }
    CHECK(s.epoch() == 3);
  }
  for (int t : total) CHECK(t == 1);
}

TEST_CASE("shard sampler: a batch runs on into the next epoch's shuffle") {
  ShardSampler s(10, 0, 1, 1);
  std::vector<std::uint32_t> out;
  s.next(7, &out);
  s.next(7, &out);  // 3 from epoch 0, 4 from epoch 1
  CHECK(out.size() == 7);
  CHECK(s.epoch() == 1);
  std::vector<int> seen(10, 0);
  for (std::size_t i = 3; i < 7; ++i) ++seen[out[i]];
  for (int c : seen) CHECK(c <= 1);
}

TEST_CASE("shard sampler: deterministic for a seed, reshuffled each epoch") {
  ShardSampler a(1000, 1, 3, 9), b(1000, 1, 3, 9), c(1000, 1, 3, 10);
  std::vector<std::uint32_t> ea, eb, ec, next_epoch;
  a.next(a.shardSize(), &ea);
  b.next(b.shardSize(), &eb);
  c.next(c.shardSize(), &ec);
  CHECK(ea == eb);
  CHECK(ea != ec);
  a.next(a.shardSize(), &next_epoch);
  CHECK(next_epoch != ea);
}

TEST_CASE("shard sampler: an empty shard yields empty batches") {
  ShardSampler s(2, 3, 4, 0);
  CHECK(s.shardSize() == 0);
  std::vector<std::uint32_t> out = {1, 2};
  s.next(5, &out);
  CHECK(out.empty());
}
