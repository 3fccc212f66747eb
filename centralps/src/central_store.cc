#include "groupsgd/centralps/central_store.h"

#include <algorithm>
#include <cstring>

#include "groupsgd/kernels/ops.h"

namespace groupsgd::centralps {

CentralStore::CentralStore(std::vector<float> initial, kernels::OptimizerConfig outer,
                           std::size_t shards, std::vector<kernels::ElementRange> no_decay)
    : count_(initial.size()), outer_kind_(outer.kind) {
  shards = std::max<std::size_t>(1, std::min(shards, std::max<std::size_t>(1, count_)));
  const std::size_t per = (count_ + shards - 1) / shards;
  for (std::size_t off = 0; off < count_ || shards_.empty(); off += per) {
    Shard s;
    s.offset = off;
    const std::size_t len = std::min(per, count_ - off);
    s.params.assign(initial.begin() + static_cast<std::ptrdiff_t>(off),
                    initial.begin() + static_cast<std::ptrdiff_t>(off + len));
    for (std::size_t p = 0; p < len || s.pieces.empty(); p += Shard::kPieceElements) {
      const std::size_t n = std::min(Shard::kPieceElements, len - p);
      s.pieces.push_back(std::make_unique<kernels::Optimizer>(
          outer, n, kernels::clipRanges(no_decay, off + p, n)));
      if (len == 0) break;
    }
    shards_.push_back(std::move(s));
    if (per == 0) break;
  }
}

Status CentralStore::applyDelta(std::span<const float> delta, float weight) {
  TensorView view;
  view.size = delta.size();
  if (!delta.empty()) view.parts.push_back(delta);
  return applyDelta(view, weight);
}

Status CentralStore::applyDelta(const TensorView& delta, float weight,
                                const std::function<void(std::size_t, std::size_t)>& applied) {
  if (delta.size != count_) {
    return internalError("delta of " + std::to_string(delta.size) + " elements for a model of " +
                         std::to_string(count_));
  }
  for (auto& s : shards_) {
    for (std::size_t p = 0; p < s.pieces.size(); ++p) {
      const std::size_t begin = p * Shard::kPieceElements;
      const std::size_t n = std::min(Shard::kPieceElements, s.params.size() - begin);
      // The outer optimizer descends along g = -weight * delta (a pseudo-gradient), read
      // where the delta lies (its message's parts) and scaled inside the step.
      grad_pieces_.clear();
      delta.rangePieces(s.offset + begin, n, &grad_pieces_);
      s.pieces[p]->step(std::span<float>(s.params).subspan(begin, n), grad_pieces_, -weight);
      if (applied) applied(s.offset + begin, n);
    }
  }
  ++version_;
  return Status::ok();
}

void CentralStore::copyRange(std::size_t offset, std::span<float> out) const {
  std::size_t done = 0;
  for (const auto& s : shards_) {
    const std::size_t end = s.offset + s.params.size();
    const std::size_t at = offset + done;
    if (done == out.size()) break;
    if (at >= end || at < s.offset) continue;
    const std::size_t n = std::min(out.size() - done, end - at);
    std::memcpy(out.data() + done, s.params.data() + (at - s.offset), n * sizeof(float));
    done += n;
  }
}

void CentralStore::snapshotInto(std::span<float> out) const {
  for (const auto& s : shards_) {
    std::memcpy(out.data() + s.offset, s.params.data(), s.params.size() * sizeof(float));
  }
}

Payload CentralStore::snapshot() const {
  auto out = std::make_shared<std::vector<float>>(count_);
  for (const auto& s : shards_) {
    std::memcpy(out->data() + s.offset, s.params.data(), s.params.size() * sizeof(float));
  }
  return out;
}

Status CentralStore::restore(std::span<const float> params, std::uint64_t version) {
  if (params.size() != count_) {
    return invalidArgument("checkpoint has " + std::to_string(params.size()) +
                           " parameters, the model has " + std::to_string(count_));
  }
  for (auto& s : shards_) {
    std::memcpy(s.params.data(), params.data() + s.offset, s.params.size() * sizeof(float));
    for (auto& piece : s.pieces) piece->reset();
  }
  version_ = version;
  return Status::ok();
}

kernels::OptimizerSnapshot CentralStore::optimizerState() const {
  kernels::OptimizerSnapshot out;
  out.kind = outer_kind_;
  out.buffers = static_cast<std::uint32_t>(kernels::optimizerStateBuffers(outer_kind_));
  out.values.resize(out.buffers * count_);
  for (const auto& s : shards_) {
    for (std::size_t p = 0; p < s.pieces.size(); ++p) {
      const kernels::Optimizer& piece = *s.pieces[p];
      out.steps = piece.stepCount();  // every piece steps with every delta: all equal
      const std::size_t at = s.offset + p * Shard::kPieceElements;
      const std::size_t n =
          std::min(Shard::kPieceElements, s.params.size() - p * Shard::kPieceElements);
      if (n == 0) continue;  // an empty model's one empty piece
      for (std::size_t b = 0; b < out.buffers; ++b) {
        std::memcpy(out.values.data() + b * count_ + at, piece.state().data() + b * n,
                    n * sizeof(float));
      }
    }
  }
  return out;
}

Status CentralStore::restoreOptimizerState(const kernels::OptimizerSnapshot& state) {
  const std::size_t buffers = kernels::optimizerStateBuffers(outer_kind_);
  if (state.kind != outer_kind_ || state.buffers != buffers ||
      state.values.size() != buffers * count_) {
    return invalidArgument(
        std::string("optimizer state of ") + kernels::optimizerKindName(state.kind) + " with " +
        std::to_string(state.values.size()) + " values; the outer optimizer is " +
        kernels::optimizerKindName(outer_kind_) + " needing " + std::to_string(buffers * count_));
  }
  std::vector<float> piece_state;
  for (auto& s : shards_) {
    for (std::size_t p = 0; p < s.pieces.size(); ++p) {
      const std::size_t at = s.offset + p * Shard::kPieceElements;
      const std::size_t n =
          std::min(Shard::kPieceElements, s.params.size() - p * Shard::kPieceElements);
      if (n == 0) continue;  // an empty model's one empty piece
      piece_state.resize(buffers * n);
      for (std::size_t b = 0; b < buffers; ++b) {
        std::memcpy(piece_state.data() + b * n, state.values.data() + b * count_ + at,
                    n * sizeof(float));
      }
      s.pieces[p]->setState(piece_state, state.steps);  // sizes checked above
    }
  }
  return Status::ok();
}

}  // namespace groupsgd::centralps
