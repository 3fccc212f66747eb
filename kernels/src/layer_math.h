// Dense-layer helpers shared by the models: softmax cross-entropy, arg-max, bias rows.
// Thread rule: stateless.
#pragma once

#include <cstddef>
#include <cstdint>

namespace groupsgd::kernels::detail {

// logits: batch×classes row-major, replaced in place by d(mean loss)/d(logits), that is
// (softmax - onehot)/batch. Returns the mean loss. Stable: subtracts each row's max.
float softmaxXentBackward(float* logits, const std::int32_t* labels, std::size_t batch,
                          std::size_t classes);

// Arg-max of each row of logits (first index on ties).
void argmaxRows(const float* logits, std::size_t batch, std::size_t classes,
                std::int32_t* out_labels);

// rows×cols row-major out = broadcast bias row (the beta=1 start of a biased GEMM).
void broadcastRows(const float* bias, std::size_t rows, std::size_t cols, float* out);

// grad_bias[j] = sum_r d[r][j].
void sumRows(const float* d, std::size_t rows, std::size_t cols, float* grad_bias);

// h = max(h, 0) in place.
void reluInPlace(float* h, std::size_t n);

// d *= (h > 0): the ReLU derivative, taken from the post-activation value.
void reluBackward(const float* h, float* d, std::size_t n);

}  // namespace groupsgd::kernels::detail
