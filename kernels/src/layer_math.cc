#include "layer_math.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace groupsgd::kernels::detail {

float softmaxXentBackward(float* logits, const std::int32_t* labels, std::size_t batch,
                          std::size_t classes) {
  if (batch == 0) return 0.0f;
  const float inv_batch = 1.0f / static_cast<float>(batch);
  double total = 0.0;
  for (std::size_t r = 0; r < batch; ++r) {
    float* z = logits + r * classes;
    const std::int32_t y = labels[r];
    assert(y >= 0 && static_cast<std::size_t>(y) < classes);
    const float max = *std::max_element(z, z + classes);
    const float shifted_y = z[y] - max;
    float sum = 0.0f;
    for (std::size_t j = 0; j < classes; ++j) {
      z[j] = std::exp(z[j] - max);
      sum += z[j];
    }
    // -log softmax_y = log(sum exp(z - max)) - (z_y - max); sum >= 1 so the log is safe.
    total += std::log(static_cast<double>(sum)) - shifted_y;
    const float norm = inv_batch / sum;
    for (std::size_t j = 0; j < classes; ++j) z[j] *= norm;
    z[y] -= inv_batch;
  }
  return static_cast<float>(total / static_cast<double>(batch));
}

void argmaxRows(const float* logits, std::size_t batch, std::size_t classes,
                std::int32_t* out_labels) {
  for (std::size_t r = 0; r < batch; ++r) {
    const float* z = logits + r * classes;
    out_labels[r] = static_cast<std::int32_t>(std::max_element(z, z + classes) - z);
  }
}

void broadcastRows(const float* bias, std::size_t rows, std::size_t cols, float* out) {
  for (std::size_t r = 0; r < rows; ++r) std::copy_n(bias, cols, out + r * cols);
}

void sumRows(const float* d, std::size_t rows, std::size_t cols, float* grad_bias) {
  std::fill_n(grad_bias, cols, 0.0f);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = d + r * cols;
    for (std::size_t j = 0; j < cols; ++j) grad_bias[j] += row[j];
  }
}

void reluInPlace(float* __restrict h, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) h[i] = std::max(h[i], 0.0f);
}

void reluBackward(const float* __restrict h, float* __restrict d, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = h[i] > 0.0f ? d[i] : 0.0f;
}

}  // namespace groupsgd::kernels::detail
