// First-order optimizers over a flat parameter vector, PyTorch conventions.
// Thread rule: an Optimizer owns its state (velocity or moments, step count); one thread at
// a time per instance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "groupsgd/kernels/element_range.h"

namespace groupsgd::kernels {

enum class OptimizerKind { kSgd, kMomentum, kNesterov, kAdam, kAdamW };

// Names are "sgd", "momentum", "nesterov", "adam", "adamw"; parse returns false on anything
// else.
bool parseOptimizerKind(std::string_view text, OptimizerKind* out);
const char* optimizerKindName(OptimizerKind kind);
// Per-element state buffers a kind keeps: 0 (sgd), 1 (momentum, nesterov: the velocity),
// 2 (adam, adamw: the first and second moments).
std::size_t optimizerStateBuffers(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.1f;
  float momentum = 0.9f;  // momentum, nesterov
  float weight_decay = 0.0f;
  float beta1 = 0.9f;    // adam, adamw
  float beta2 = 0.999f;  // adam, adamw
  float eps = 1e-8f;     // adam, adamw
};

// With gs = grad_scale, wd = weight_decay and t the number of steps taken including this one:
//   sgd:      g' = gs*g + wd*p;  p -= lr*g'
//   momentum: g' as sgd;  v = momentum*v + g';  p -= lr*v
//   nesterov: g' as sgd;  v = momentum*v + g';  p -= lr*(g' + momentum*v)
//   adam:     g' as sgd (L2, torch.optim.Adam);  m = b1*m + (1-b1)*g';
//             v = b2*v + (1-b2)*g'*g';  p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
//   adamw:    p *= 1 - lr*wd (decoupled, torch.optim.AdamW), then adam's update with g' = gs*g
// State and the step count start at zero. Elements inside a no_decay range take wd = 0
// (biases and norms, optimizer.decay_1d false).
class Optimizer {
 public:
  // no_decay: ranges of [0, n) without weight decay; normalised with clipRanges.
  Optimizer(OptimizerConfig cfg, std::size_t n, std::vector<ElementRange> no_decay = {});

  // params and grad must both have the size given at construction (a contract).
  // grad_scale multiplies the gradient inside the same pass (a sum of batch-weighted
  // gradients becomes their mean without a separate scaling pass over it); the result
  // is bit for bit that of scaling grad first.
  void step(std::span<float> params, std::span<const float> grad, float grad_scale = 1.0f);
  // The same with the gradient in consecutive pieces (together n elements), e.g. the parts
  // of a received message, stepped where they lie instead of copied together first; the
  // same bits as step() on their concatenation.
  void step(std::span<float> params, std::span<const std::span<const float>> grad_pieces,
            float grad_scale);
  // Zeroes the state and the step count.
  void reset();
  const OptimizerConfig& config() const { return cfg_; }
  // Takes effect from the next step, for every kind (adam's bias correction depends on
  // the step count only).
  void setLearningRate(float lr) { cfg_.lr = lr; }
  const std::vector<ElementRange>& noDecayRanges() const { return no_decay_; }

  // The state for a checkpoint: optimizerStateBuffers(kind) buffers of n floats one after
  // the other (velocity; or first moments then second moments), and the steps taken.
  std::span<const float> state() const { return state_; }
  std::uint64_t stepCount() const { return steps_; }
  // Restores what state() and stepCount() gave; false (and nothing changed) when the
  // size is not optimizerStateBuffers(kind) * n.
  bool setState(std::span<const float> state, std::uint64_t steps);

 private:
  OptimizerConfig cfg_;
  std::size_t n_;
  std::vector<ElementRange> no_decay_;  // sorted, disjoint
  std::vector<float> state_;            // empty for plain sgd
  std::uint64_t steps_ = 0;
};

}  // namespace groupsgd::kernels
