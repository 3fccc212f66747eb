// How the central PS is cut into shards (docs/shards.md): S contiguous ranges of the flat
// parameter vector on tensor boundaries, balanced by bytes. Boundary k (k = 1..S-1) is the
// tensor boundary nearest to k/S of the model's bytes, after boundary k-1 and leaving at
// least one tensor for each later shard; a model with fewer tensors than shards is an error.
// Split "even" instead cuts S equal element ranges, inside tensors where they fall (every
// merge is element by element, so a shard need not hold whole tensors): for models whose
// bytes sit in one tensor. Plain functions; any thread.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "groupsgd/common/status.h"
#include "groupsgd/kernels/element_range.h"
#include "groupsgd/kernels/model.h"

namespace groupsgd::centralps {

struct ShardRange {
  std::size_t begin = 0, end = 0;  // [begin, end) of the flat vector
};

// A built-in model's tensor sizes in layout order (each weight tensor, then its bias).
std::vector<std::size_t> modelTensorSizes(kernels::ModelKind kind);

// The S ranges (rule above).
Result<std::vector<ShardRange>> planShards(std::span<const std::size_t> tensor_sizes,
                                           std::size_t shards);
// S ranges of equal size (the first total % S one element longer).
Result<std::vector<ShardRange>> planEvenShards(std::size_t total, std::size_t shards);

// `ranges` (flat positions) as seen from inside `shard`: clipped to it, shifted to 0.
std::vector<kernels::ElementRange> rangesWithin(const std::vector<kernels::ElementRange>& ranges,
                                                ShardRange shard);

}  // namespace groupsgd::centralps
