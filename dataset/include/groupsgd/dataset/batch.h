// Turning a Dataset into training batches: gathering rows as floats, and drawing each
// worker's shard in per-epoch shuffled order. Thread rule: gatherBatch is stateless; a
// ShardSampler is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "groupsgd/dataset/idx.h"

namespace groupsgd::dataset {

// x_out: indices.size()×featureDim floats, pixels scaled to [0,1]; y_out: the labels.
// Every index must be < d.count (assert).
void gatherBatch(const Dataset& d, std::span<const std::uint32_t> indices, float* x_out,
                 std::int32_t* y_out);

// Samples the shard {i < dataset_size : i % shard_count == shard_index} without
// replacement: each epoch is a fresh shuffle of the shard, and a batch that runs past the
// end of an epoch continues into the next. Deterministic for (seed, shard_index).
class ShardSampler {
 public:
  // Requires shard_index < shard_count and dataset_size <= 2^32 (assert).
  ShardSampler(std::size_t dataset_size, std::size_t shard_index, std::size_t shard_count,
               std::uint64_t seed);

  // Replaces *out with the next `batch` indices (none when the shard is empty).
  void next(std::size_t batch, std::vector<std::uint32_t>* out);
  std::size_t shardSize() const { return order_.size(); }
  // Number of whole passes over the shard drawn so far.
  std::uint64_t epoch() const { return epoch_; }

 private:
  void shuffle();

  std::vector<std::uint32_t> order_;
  std::size_t pos_ = 0;
  std::uint64_t epoch_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace groupsgd::dataset
