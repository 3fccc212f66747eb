#include "groupsgd/kernels/optimizer.h"

#include <algorithm>
#include <cmath>

#include "adam_step.h"
#include "contract.h"
#include "groupsgd/base/enum_names.h"
#include "parallel.h"

namespace groupsgd::kernels {
namespace {

// One fused pass per kind over [b, e): params, grad and state each read once. The
// gradient is g[i] * gs, rounded as a separate kernels::scale pass would round it (so
// scaling here changes no result, and gs = 1 is exact).
void sgdRange(float* __restrict p, const float* __restrict g, std::size_t b, std::size_t e,
              float lr, float wd, float gs) {
  for (std::size_t i = b; i < e; ++i) {
    const float gi = g[i] * gs;
    p[i] -= lr * (gi + wd * p[i]);
  }
}

void momentumRange(float* __restrict p, const float* __restrict g, float* __restrict v,
                   std::size_t b, std::size_t e, float lr, float mu, float wd, float gs,
                   bool nesterov) {
  if (nesterov) {
    for (std::size_t i = b; i < e; ++i) {
      float gi = g[i] * gs + wd * p[i];
      float vi = mu * v[i] + gi;
      v[i] = vi;
      p[i] -= lr * (gi + mu * vi);
    }
  } else {
    for (std::size_t i = b; i < e; ++i) {
      float vi = mu * v[i] + (g[i] * gs + wd * p[i]);
      v[i] = vi;
      p[i] -= lr * vi;
    }
  }
}

// keep multiplies p first (adamw: 1 - lr*wd; adam: exactly 1); l2 adds l2*p to the gradient
// (adam: wd; adamw: 0). The operations and their order are torch's, element by element.
void adamRange(float* __restrict p, const float* __restrict g, float* __restrict m,
               float* __restrict v, std::size_t b, std::size_t e, const detail::AdamStep& s,
               float keep, float l2, float gs) {
  const float b1 = s.b1, omb1 = s.one_minus_b1, b2 = s.b2, omb2 = s.one_minus_b2;
  const float step_size = s.step_size, bc2_sqrt = s.bc2_sqrt, eps = s.eps;
  for (std::size_t i = b; i < e; ++i) {
    const float pi = p[i] * keep;
    const float gi = g[i] * gs + l2 * pi;
    const float mi = b1 * m[i] + omb1 * gi;
    const float vi = b2 * v[i] + omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * (mi / (std::sqrt(vi) / bc2_sqrt + eps));
  }
}

// Calls fn(b, e, decay) over [begin, end) split at the no-decay ranges (sorted, disjoint).
template <typename Fn>
void forEachDecaySpan(const std::vector<ElementRange>& no_decay, std::size_t begin, std::size_t end,
                      Fn&& fn) {
  auto it = std::upper_bound(no_decay.begin(), no_decay.end(), begin,
                             [](std::size_t at, const ElementRange& r) { return at < r.end; });
  std::size_t at = begin;
  for (; it != no_decay.end() && it->begin < end; ++it) {
    if (at < it->begin) fn(at, it->begin, true);
    const std::size_t stop = std::min(end, it->end);
    fn(std::max(at, it->begin), stop, false);
    at = stop;
  }
  if (at < end) fn(at, end, true);
}

}  // namespace

constexpr std::array<base::EnumName<OptimizerKind>, 5> kOptimizerKindNames{{
    {OptimizerKind::kSgd, "sgd"},
    {OptimizerKind::kMomentum, "momentum"},
    {OptimizerKind::kNesterov, "nesterov"},
    {OptimizerKind::kAdam, "adam"},
    {OptimizerKind::kAdamW, "adamw"},
}};

bool parseOptimizerKind(std::string_view text, OptimizerKind* out) {
  return base::parseInto(kOptimizerKindNames, text, out);
}

const char* optimizerKindName(OptimizerKind kind) {
  return base::nameOf(kOptimizerKindNames, kind);
}

std::size_t optimizerStateBuffers(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return 0;
    case OptimizerKind::kMomentum:
    case OptimizerKind::kNesterov:
      return 1;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      return 2;
  }
  return 0;
}

Optimizer::Optimizer(OptimizerConfig cfg, std::size_t n, std::vector<ElementRange> no_decay)
    : cfg_(cfg), n_(n), no_decay_(clipRanges(no_decay, 0, n)) {
  state_.assign(optimizerStateBuffers(cfg_.kind) * n_, 0.0f);
}

void Optimizer::reset() {
  std::fill(state_.begin(), state_.end(), 0.0f);
  steps_ = 0;
}

bool Optimizer::setState(std::span<const float> state, std::uint64_t steps) {
  if (state.size() != state_.size()) return false;
  std::copy(state.begin(), state.end(), state_.begin());
  steps_ = steps;
  return true;
}

void Optimizer::step(std::span<float> params, std::span<const float> grad, float grad_scale) {
  GSGD_KERNEL_REQUIRE(params.size() == n_ && grad.size() == n_);
  const std::span<const float> whole[] = {grad};
  step(params, std::span<const std::span<const float>>(whole), grad_scale);
}

void Optimizer::step(std::span<float> params, std::span<const std::span<const float>> grad_pieces,
                     float grad_scale) {
  std::size_t total = 0;
  for (const auto& piece : grad_pieces) total += piece.size();
  GSGD_KERNEL_REQUIRE(params.size() == n_ && total == n_);
  ++steps_;
  float* p = params.data();
  float* s = state_.data();
  const float lr = cfg_.lr, mu = cfg_.momentum, wd = cfg_.weight_decay, gs = grad_scale;
  const OptimizerKind kind = cfg_.kind;
  const auto& no_decay = no_decay_;
  const std::size_t n = n_;
  const detail::AdamStep adam = detail::adamStepFor(cfg_, steps_);
  // [sb, se) of the model with its gradient at g (g[0] is element sb's): every kernel
  // runs on pointers moved to sb, with indices from 0.
  auto apply = [&](std::size_t sb, std::size_t se, const float* g, bool decay) {
    const float w = decay ? wd : 0.0f;
    const std::size_t len = se - sb;
    switch (kind) {
      case OptimizerKind::kSgd:
        sgdRange(p + sb, g, 0, len, lr, w, gs);
        break;
      case OptimizerKind::kMomentum:
      case OptimizerKind::kNesterov:
        momentumRange(p + sb, g, s + sb, 0, len, lr, mu, w, gs, kind == OptimizerKind::kNesterov);
        break;
      case OptimizerKind::kAdam:
        adamRange(p + sb, g, s + sb, s + n + sb, 0, len, adam, 1.0f, w, gs);
        break;
      case OptimizerKind::kAdamW:
        adamRange(p + sb, g, s + sb, s + n + sb, 0, len, adam, decay ? adam.keep : 1.0f, 0.0f, gs);
        break;
    }
  };
  std::size_t offset = 0;
  for (const auto& piece : grad_pieces) {
    const float* g = piece.data();
    const std::size_t at = offset;
    detail::parallelFor(piece.size(), [&](std::size_t b, std::size_t e) {
      forEachDecaySpan(no_decay, at + b, at + e, [&](std::size_t sb, std::size_t se, bool decay) {
        apply(sb, se, g + (sb - at), decay);
      });
    });
    offset += piece.size();
  }
}

}  // namespace groupsgd::kernels
