// The authoritative model: a flat float32 vector split into key-range shards (one shard
// by default), its version counter, and the server-side (outer) optimizer that merges
// group deltas. Knows nothing about sockets, so it is unit-tested directly.
// Thread rule: owned by the central PS thread; not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "groupsgd/common/payload.h"
#include "groupsgd/common/status.h"
#include "groupsgd/common/tensor_view.h"
#include "groupsgd/kernels/optimizer.h"
#include "groupsgd/kernels/optimizer_snapshot.h"

namespace groupsgd::centralps {

// One key range [offset, offset + size) of the parameter vector with its own optimizer
// state, so shards can later live on different threads or hosts. The optimizer state is
// kept per piece of at most kPieceElements (the optimizers are element-wise, so this
// changes no result), which lets a delta be applied piece by piece through one
// piece-sized scratch instead of a model-sized one.
struct Shard {
  static constexpr std::size_t kPieceElements = 1u << 20;
  std::size_t offset = 0;
  std::vector<float> params;
  std::vector<std::unique_ptr<kernels::Optimizer>> pieces;  // piece p: [p*kPiece, ...)
};

class CentralStore {
 public:
  // outer: the server optimizer; its lr is eta_out (1 = apply deltas as they are).
  // no_decay: flat ranges the outer optimizer does not decay.
  CentralStore(std::vector<float> initial, kernels::OptimizerConfig outer, std::size_t shards = 1,
               std::vector<kernels::ElementRange> no_decay = {});

  std::size_t paramCount() const { return count_; }
  std::uint64_t version() const { return version_; }
  std::size_t shardCount() const { return shards_.size(); }

  // theta <- outer_step(theta, g = -weight * delta); version + 1. The caller has
  // validated size and finiteness; a size mismatch here is a bug reported as a Status.
  Status applyDelta(std::span<const float> delta, float weight);
  // The same from a delta seen in place in its message (no model-sized copy).
  // applied(offset, n), when given, is called after each piece [offset, offset + n) has
  // its final value (in order), so a caller can copy and send it while the rest is done.
  Status applyDelta(const TensorView& delta, float weight,
                    const std::function<void(std::size_t, std::size_t)>& applied = {});
  // Copies parameters [offset, offset + out.size()) into out.
  void copyRange(std::size_t offset, std::span<float> out) const;
  // Copy of the current parameters, immutable so it can be sent without copying again.
  Payload snapshot() const;
  // The same into a caller's buffer of paramCount() floats (reused between versions).
  void snapshotInto(std::span<float> out) const;
  // Restores a model (checkpoint resume); the outer optimizer's state starts fresh.
  Status restore(std::span<const float> params, std::uint64_t version);
  // The outer optimizer's state over the whole vector, in flat order (for a checkpoint).
  kernels::OptimizerSnapshot optimizerState() const;
  // Restores what optimizerState() gave; InvalidArgument (state unchanged) when the kind
  // or the size is not this store's.
  Status restoreOptimizerState(const kernels::OptimizerSnapshot& state);

 private:
  std::size_t count_ = 0;
  std::uint64_t version_ = 0;
  std::vector<Shard> shards_;
  std::vector<std::span<const float>> grad_pieces_;  // where one piece's delta lies
  kernels::OptimizerKind outer_kind_;
};

}  // namespace groupsgd::centralps
