// An optimizer's state over a whole flat vector, as a checkpoint holds it: the kind it
// belongs to, the steps taken, and optimizerStateBuffers(kind) buffers of N floats one after
// another (velocity; or first then second moments), in the vector's flat order.
// Thread rule: a plain value.
#pragma once

#include <cstdint>
#include <vector>

#include "groupsgd/kernels/optimizer.h"

namespace groupsgd::kernels {

struct OptimizerSnapshot {
  OptimizerKind kind = OptimizerKind::kSgd;
  std::uint32_t buffers = 0;  // 0: no state (sgd, or none saved)
  std::uint64_t steps = 0;
  std::vector<float> values;  // buffers * N
};

}  // namespace groupsgd::kernels
