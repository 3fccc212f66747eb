// Adam's per-step scalars, shared by the CPU step (optimizer.cc) and the CUDA one
// (cuda/vector_ops.cu) so that both round them the same way. Internal to kernels/.
// Thread rule: pure functions.
#pragma once

#include <cmath>
#include <cstdint>

#include "groupsgd/kernels/optimizer.h"

namespace groupsgd::kernels::detail {

// Rounded to float from double, as torch rounds the Python floats it computes them in.
struct AdamStep {
  float b1, one_minus_b1, b2, one_minus_b2;
  float step_size;  // lr / (1 - b1^t)
  float bc2_sqrt;   // sqrt(1 - b2^t)
  float eps;
  float keep;  // adamw: 1 - lr*wd, what p is multiplied by before the update
};

// t: steps taken including this one (>= 1).
inline AdamStep adamStepFor(const OptimizerConfig& c, std::uint64_t t) {
  const double b1 = c.beta1, b2 = c.beta2, td = static_cast<double>(t);
  const double bc1 = 1.0 - std::pow(b1, td), bc2 = 1.0 - std::pow(b2, td);
  return {c.beta1,
          static_cast<float>(1.0 - b1),
          c.beta2,
          static_cast<float>(1.0 - b2),
          static_cast<float>(static_cast<double>(c.lr) / bc1),
          static_cast<float>(std::sqrt(bc2)),
          c.eps,
          static_cast<float>(1.0 - static_cast<double>(c.lr) * c.weight_decay)};
}

}  // namespace groupsgd::kernels::detail
