#include "groupsgd/centralps/shard_plan.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace groupsgd::centralps {

std::vector<std::size_t> modelTensorSizes(kernels::ModelKind kind) {
  // Every built-in layout is weight | bias | weight | bias ... (model.h): the 1-D ranges
  // (biases) mark every tensor boundary.
  std::vector<std::size_t> sizes;
  std::size_t at = 0;
  for (const kernels::ElementRange& bias : kernels::oneDimParamRanges(kind)) {
    if (bias.begin > at) sizes.push_back(bias.begin - at);
    sizes.push_back(bias.end - bias.begin);
    at = bias.end;
  }
  return sizes;
}

Result<std::vector<ShardRange>> planShards(std::span<const std::size_t> tensor_sizes,
                                           std::size_t shards) {
  if (shards == 0) return invalidArgument("central_shards must be at least 1");
  if (tensor_sizes.size() < shards) {
    return invalidArgument("central_shards " + std::to_string(shards) + " exceeds the model's " +
                           std::to_string(tensor_sizes.size()) +
                           " tensors (a shard holds whole tensors)");
  }
  // ends[i] = flat position after tensor i.
  std::vector<std::size_t> ends;
  std::size_t total = 0;
  for (std::size_t s : tensor_sizes) ends.push_back(total += s);
  std::vector<ShardRange> out;
  std::size_t first = 0;  // first tensor of the shard being cut
  for (std::size_t k = 1; k < shards; ++k) {
    const double target = static_cast<double>(total) * static_cast<double>(k) / shards;
    // Its last tensor: from `first` up to leaving one tensor for each later shard.
    const std::size_t last_allowed = tensor_sizes.size() - 1 - (shards - k);
    std::size_t best = first;
    for (std::size_t i = first; i <= last_allowed; ++i) {
      const auto gap = [&](std::size_t j) {
        return std::abs(static_cast<double>(ends[j]) - target);
      };
      if (gap(i) < gap(best)) best = i;
    }
    out.push_back({first == 0 ? 0 : ends[first - 1], ends[best]});
    first = best + 1;
  }
  out.push_back({first == 0 ? 0 : ends[first - 1], total});
  return out;
}

Result<std::vector<ShardRange>> planEvenShards(std::size_t total, std::size_t shards) {
  if (shards == 0 || shards > total) {
    return invalidArgument("central_shards " + std::to_string(shards) +
                           " does not fit a model of " + std::to_string(total) + " parameters");
  }
  std::vector<ShardRange> out;
  std::size_t at = 0;
  for (std::size_t k = 0; k < shards; ++k) {
    const std::size_t n = total / shards + (k < total % shards ? 1 : 0);
    out.push_back({at, at + n});
    at += n;
  }
  return out;
}

std::vector<kernels::ElementRange> rangesWithin(const std::vector<kernels::ElementRange>& ranges,
                                                ShardRange shard) {
  std::vector<kernels::ElementRange> out;
  for (const auto& r : ranges) {
    const std::size_t b = std::max(r.begin, shard.begin), e = std::min(r.end, shard.end);
    if (b < e) out.push_back({b - shard.begin, e - shard.begin});
  }
  return out;
}

}  // namespace groupsgd::centralps
