#include "groupsgd/dataset/batch.h"

#include <cassert>

namespace groupsgd::dataset {

void gatherBatch(const Dataset& d, std::span<const std::uint32_t> indices, float* x_out,
                 std::int32_t* y_out) {
  const std::size_t dim = d.featureDim();
  constexpr float kScale = 1.0f / 255.0f;
  for (std::size_t b = 0; b < indices.size(); ++b) {
    const std::size_t idx = indices[b];
    assert(idx < d.count);
    const std::uint8_t* __restrict src = d.images.data() + idx * dim;
    float* __restrict dst = x_out + b * dim;
    for (std::size_t j = 0; j < dim; ++j) dst[j] = static_cast<float>(src[j]) * kScale;
    y_out[b] = d.labels[idx];
  }
}

}  // namespace groupsgd::dataset
