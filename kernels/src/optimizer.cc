#include "groupsgd/kernels/optimizer.h"

#include <algorithm>

#include "contract.h"
#include "groupsgd/base/enum_names.h"
#include "parallel.h"

namespace groupsgd::kernels {
namespace {

// One fused pass per kind over [b, e): params, grad and velocity each read once. The
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

}  // namespace

constexpr std::array<base::EnumName<OptimizerKind>, 3> kOptimizerKindNames{{
    {OptimizerKind::kSgd, "sgd"},
    {OptimizerKind::kMomentum, "momentum"},
    {OptimizerKind::kNesterov, "nesterov"},
}};

bool parseOptimizerKind(std::string_view text, OptimizerKind* out) {
  return base::parseInto(kOptimizerKindNames, text, out);
}

const char* optimizerKindName(OptimizerKind kind) {
  return base::nameOf(kOptimizerKindNames, kind);
}

Optimizer::Optimizer(OptimizerConfig cfg, std::size_t n) : cfg_(cfg), n_(n) {
  if (cfg_.kind != OptimizerKind::kSgd) velocity_.assign(n_, 0.0f);
}

void Optimizer::reset() { std::fill(velocity_.begin(), velocity_.end(), 0.0f); }

void Optimizer::step(std::span<float> params, std::span<const float> grad, float grad_scale) {
  GSGD_KERNEL_REQUIRE(params.size() == n_ && grad.size() == n_);
  float* p = params.data();
  const float* g = grad.data();
  const float lr = cfg_.lr, mu = cfg_.momentum, wd = cfg_.weight_decay, gs = grad_scale;
  if (cfg_.kind == OptimizerKind::kSgd) {
    detail::parallelFor(n_,
                        [=](std::size_t b, std::size_t e) { sgdRange(p, g, b, e, lr, wd, gs); });
    return;
  }
  float* v = velocity_.data();
  const bool nesterov = cfg_.kind == OptimizerKind::kNesterov;
  detail::parallelFor(n_, [=](std::size_t b, std::size_t e) {
    momentumRange(p, g, v, b, e, lr, mu, wd, gs, nesterov);
  });
}

}  // namespace groupsgd::kernels
