// Buffers pushed with the gradients (Push.bufferCount; groupsgd.torch sync_buffers): the
// last values of every push are a member's batch-norm statistics, not a gradient. They
// stay out of the gradient norm bound, and with placement server the replica's range
// becomes their batch-weighted mean instead of an optimizer step (with placement workers
// the mean gradient already is that mean, and the members copy it). docs/protocol.md,
// "Buffers".
#include <algorithm>

#include "groupsgd/common/log.h"
#include "groupsgd/groupps/group_server.h"
#include "groupsgd/kernels/ops.h"

namespace groupsgd::groupps {

Status GroupServer::checkBufferCount(const InMessage& msg, std::uint64_t elements) const {
  const std::uint64_t count = msg.header().getBody().getPush().getBufferCount();
  if (count >= elements && count > 0) {
    return invalidArgument("push states " + std::to_string(count) + " buffer values of " +
                           std::to_string(elements) + ": no parameters left");
  }
  if (buffer_count_ && *buffer_count_ != count) {
    return invalidArgument("push states " + std::to_string(count) +
                           " buffer values, this group's pushes " + std::to_string(*buffer_count_) +
                           " (every member must wrap the same model with the same sync_buffers)");
  }
  return Status::ok();
}

double GroupServer::bufferSquares(std::span<const float> values, std::size_t offset) const {
  if (!buffer_count_ || *buffer_count_ == 0) return 0.0;
  const std::size_t first = replica().size() - *buffer_count_;
  const std::size_t end = offset + values.size();
  if (end <= first) return 0.0;
  const std::size_t from = std::max(first, offset) - offset;
  return kernels::sumSquares(values.subspan(from));
}

double GroupServer::bufferSquares(const TensorView& view) const {
  double squares = 0.0;
  std::size_t off = 0;
  for (const auto& p : view.parts) {
    squares += bufferSquares(p, off);
    off += p.size();
  }
  return squares;
}

void GroupServer::setBufferMean(std::span<float> replica_part, std::span<const float> sum_part,
                                float scale, std::size_t offset) const {
  if (!buffer_count_ || *buffer_count_ == 0) return;
  const std::size_t first = replica().size() - *buffer_count_;
  const std::size_t end = offset + replica_part.size();
  if (end <= first) return;
  const std::size_t from = std::max(first, offset) - offset;
  auto out = replica_part.subspan(from);
  kernels::copy(sum_part.subspan(from), out);
  kernels::scale(out, scale);  // the sum of batch-weighted values -> their mean
}

}  // namespace groupsgd::groupps
