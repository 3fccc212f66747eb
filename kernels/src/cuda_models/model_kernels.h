// The small CUDA kernels the CUDA models need besides cuBLAS and cuDNN, and the row-major
// wrappers around cuBLAS. Every function enqueues on the legacy default stream and checks
// the launch. Thread rule: stateless.
#pragma once

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

#include "groupsgd/kernels/gemm.h"
#include "groupsgd/kernels/kernel_status.h"

namespace groupsgd::kernels::detail::gpu {

// out[r][c] = bias[c] for a rows×cols row-major out (the beta=1 start of a biased GEMM).
KernelStatus broadcastRows(const float* bias, std::size_t rows, std::size_t cols, float* out);
// out[r][c] += bias[c].
KernelStatus addRowBias(float* out, const float* bias, std::size_t rows, std::size_t cols);
// x[i] = value.
KernelStatus fill(float* x, std::size_t n, float value);
// h = max(h, 0); d *= (h > 0) with h the post-activation value.
KernelStatus reluInPlace(float* h, std::size_t n);
KernelStatus reluBackward(const float* h, float* d, std::size_t n);
// As the CPU softmaxXentBackward: logits (batch×classes) become (softmax - onehot)/batch,
// row_loss[r] gets row r's cross-entropy in double. One thread per row.
KernelStatus softmaxXentBackward(float* logits, const std::int32_t* labels, std::size_t batch,
                                 std::size_t classes, double* row_loss);

// C = alpha·op(A)·op(B) + beta·C on row-major matrices, with the arguments of kernels::gemm
// (C is m×n, the inner dimension k).
KernelStatus gemm(cublasHandle_t h, Transpose ta, Transpose tb, std::size_t m, std::size_t n,
                  std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
                  std::size_t ldb, float beta, float* c, std::size_t ldc);
// grad_bias[c] = sum_r d[r][c] (d rows×cols row-major) as d^T·ones; ones holds >= rows ones.
KernelStatus sumRows(cublasHandle_t h, const float* d, std::size_t rows, std::size_t cols,
                     const float* ones, float* grad_bias);

}  // namespace groupsgd::kernels::detail::gpu
