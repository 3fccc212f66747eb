#include <algorithm>
#include <cassert>
#include <limits>
#include <utility>

#include "groupsgd/dataset/batch.h"
#include "shuffle.h"

namespace groupsgd::dataset {
using detail::mixSeed;
using detail::uniformBelow;

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
