#include <algorithm>
#include <cassert>
#include <limits>
#include <utility>

#include "groupsgd/dataset/batch.h"

namespace groupsgd::dataset {
namespace {

// Uniform in [0, n) by rejection; std::uniform_int_distribution's algorithm differs between
// standard libraries, and shards must shuffle identically everywhere.
std::uint64_t uniformBelow(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t reject_below = (0 - n) % n;  // 2^64 mod n
  std::uint64_t x;
  do {
    x = rng();
  } while (x < reject_below);
  return x % n;
}

// Decorrelates the shards' shuffles when they share a seed.
std::uint64_t mixSeed(std::uint64_t seed, std::uint64_t shard_index) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (shard_index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

ShardSampler::ShardSampler(std::size_t dataset_size, std::size_t shard_index,
                           std::size_t shard_count, std::uint64_t seed)
    : rng_(mixSeed(seed, shard_index)) {
  assert(shard_count > 0 && shard_index < shard_count);
  assert(dataset_size <= std::size_t{std::numeric_limits<std::uint32_t>::max()} + 1);
  if (shard_index < dataset_size)
    order_.reserve((dataset_size - shard_index - 1) / shard_count + 1);
  for (std::size_t i = shard_index; i < dataset_size; i += shard_count) {
    order_.push_back(static_cast<std::uint32_t>(i));
  }
  shuffle();
}

void ShardSampler::shuffle() {
  // Fisher-Yates.
  for (std::size_t i = order_.size(); i > 1; --i) {
    std::swap(order_[i - 1], order_[uniformBelow(rng_, i)]);
  }
}

void ShardSampler::next(std::size_t batch, std::vector<std::uint32_t>* out) {
  out->clear();
  if (order_.empty()) return;
  out->reserve(batch);
  while (out->size() < batch) {
    const std::size_t take = std::min(batch - out->size(), order_.size() - pos_);
    out->insert(out->end(), order_.begin() + pos_, order_.begin() + pos_ + take);
    pos_ += take;
    if (pos_ == order_.size()) {  // epoch done: start the next one now, so epoch() counts it
      pos_ = 0;
      ++epoch_;
      shuffle();
    }
  }
}

}  // namespace groupsgd::dataset
