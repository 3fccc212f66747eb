// First-order optimizers over a flat parameter vector, PyTorch conventions.
// Thread rule: an Optimizer owns its velocity; one thread at a time per instance.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

namespace groupsgd::kernels {

enum class OptimizerKind { kSgd, kMomentum, kNesterov };

// Names are "sgd", "momentum", "nesterov"; parse returns false on anything else.
bool parseOptimizerKind(std::string_view text, OptimizerKind* out);
const char* optimizerKindName(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
};

// With g' = grad_scale*g + weight_decay*p:
//   sgd:      p -= lr*g'
//   momentum: v = momentum*v + g';  p -= lr*v
//   nesterov: v = momentum*v + g';  p -= lr*(g' + momentum*v)
// Velocity starts at zero.
class Optimizer {
 public:
  Optimizer(OptimizerConfig cfg, std::size_t n);

  // params and grad must both have the size given at construction (a contract).
  // grad_scale multiplies the gradient inside the same pass (a sum of batch-weighted
  // gradients becomes their mean without a separate scaling pass over it); the result
  // is bit for bit that of scaling grad first.
  void step(std::span<float> params, std::span<const float> grad, float grad_scale = 1.0f);
  // Zeroes the velocity.
  void reset();
  const OptimizerConfig& config() const { return cfg_; }
  void setLearningRate(float lr) { cfg_.lr = lr; }

 private:
  OptimizerConfig cfg_;
  std::size_t n_;
  std::vector<float> velocity_;  // empty for plain sgd
};

}  // namespace groupsgd::kernels
