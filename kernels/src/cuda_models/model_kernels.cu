#include <cuda_runtime_api.h>

#include <climits>

#include "gpu_check.h"
#include "model_kernels.h"

namespace groupsgd::kernels::detail::gpu {
namespace {

constexpr unsigned kThreads = 256;
constexpr std::size_t kMaxBlocks = 4096;  // grid-stride loops cover the rest

unsigned blocksFor(std::size_t n) {
  const std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < kMaxBlocks ? (b == 0 ? 1 : b) : kMaxBlocks);
}

KernelStatus launched(const char* what) { return cudaStatus(cudaGetLastError(), what); }

__global__ void broadcastRowsKernel(const float* bias, std::size_t total, std::size_t cols,
                                    float* out) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    out[i] = bias[i % cols];
  }
}

__global__ void addRowBiasKernel(float* out, const float* bias, std::size_t total,
                                 std::size_t cols) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    out[i] += bias[i % cols];
  }
}

__global__ void fillKernel(float* x, std::size_t n, float value) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    x[i] = value;
  }
}

__global__ void reluKernel(float* h, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    h[i] = fmaxf(h[i], 0.0f);
  }
}

__global__ void reluBackwardKernel(const float* h, float* d, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    d[i] = h[i] > 0.0f ? d[i] : 0.0f;
  }
}

// The CPU algorithm row by row: subtract the max, exponentiate, normalise, subtract the
// one-hot, all divided by the batch.
__global__ void softmaxXentKernel(float* logits, const std::int32_t* labels, std::size_t batch,
                                  std::size_t classes, double* row_loss) {
  for (std::size_t r = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; r < batch;
       r += std::size_t(gridDim.x) * blockDim.x) {
    float* z = logits + r * classes;
    const std::int32_t y = labels[r];
    float max = z[0];
    for (std::size_t j = 1; j < classes; ++j) max = fmaxf(max, z[j]);
    const float shifted_y = z[y] - max;
    float sum = 0.0f;
    for (std::size_t j = 0; j < classes; ++j) {
      z[j] = expf(z[j] - max);
      sum += z[j];
    }
    row_loss[r] = log(static_cast<double>(sum)) - shifted_y;
    const float norm = (1.0f / static_cast<float>(batch)) / sum;
    for (std::size_t j = 0; j < classes; ++j) z[j] *= norm;
    z[y] -= 1.0f / static_cast<float>(batch);
  }
}

cublasOperation_t op(Transpose t) { return t == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace

KernelStatus broadcastRows(const float* bias, std::size_t rows, std::size_t cols, float* out) {
  const std::size_t total = rows * cols;
  if (total == 0) return KernelStatus::success();
  broadcastRowsKernel<<<blocksFor(total), kThreads>>>(bias, total, cols, out);
  return launched("broadcastRows");
}

KernelStatus addRowBias(float* out, const float* bias, std::size_t rows, std::size_t cols) {
  const std::size_t total = rows * cols;
  if (total == 0) return KernelStatus::success();
  addRowBiasKernel<<<blocksFor(total), kThreads>>>(out, bias, total, cols);
  return launched("addRowBias");
}

KernelStatus fill(float* x, std::size_t n, float value) {
  if (n == 0) return KernelStatus::success();
  fillKernel<<<blocksFor(n), kThreads>>>(x, n, value);
  return launched("fill");
}

KernelStatus reluInPlace(float* h, std::size_t n) {
  if (n == 0) return KernelStatus::success();
  reluKernel<<<blocksFor(n), kThreads>>>(h, n);
  return launched("relu");
}

KernelStatus reluBackward(const float* h, float* d, std::size_t n) {
  if (n == 0) return KernelStatus::success();
  reluBackwardKernel<<<blocksFor(n), kThreads>>>(h, d, n);
  return launched("reluBackward");
}

KernelStatus softmaxXentBackward(float* logits, const std::int32_t* labels, std::size_t batch,
                                 std::size_t classes, double* row_loss) {
  if (batch == 0) return KernelStatus::success();
  softmaxXentKernel<<<blocksFor(batch), kThreads>>>(logits, labels, batch, classes, row_loss);
  return launched("softmaxXentBackward");
}

KernelStatus gemm(cublasHandle_t h, Transpose ta, Transpose tb, std::size_t m, std::size_t n,
                  std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
                  std::size_t ldb, float beta, float* c, std::size_t ldc) {
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
      ldc > INT_MAX) {
    return KernelStatus::error(KernelStatus::Code::kInvalidArgument,
                               "gemm dimensions exceed cuBLAS's int range");
  }
  // A row-major matrix is its transpose in column-major order, so C^T = op(B)^T op(A)^T is
  // one column-major GEMM with the operands swapped.
  return blasStatus(cublasSgemm(h, op(tb), op(ta), int(n), int(m), int(k), &alpha, b, int(ldb), a,
                                int(lda), &beta, c, int(ldc)),
                    "cublasSgemm");
}

KernelStatus sumRows(cublasHandle_t h, const float* d, std::size_t rows, std::size_t cols,
                     const float* ones, float* grad_bias) {
  if (rows > INT_MAX || cols > INT_MAX) {
    return KernelStatus::error(KernelStatus::Code::kInvalidArgument,
                               "sumRows dimensions exceed cuBLAS's int range");
  }
  const float one = 1.0f, zero = 0.0f;
  // Column-major, d is a cols×rows matrix with leading dimension cols: grad = d · ones.
  return blasStatus(cublasSgemv(h, CUBLAS_OP_N, int(cols), int(rows), &one, d, int(cols), ones, 1,
                                &zero, grad_bias, 1),
                    "cublasSgemv");
}

}  // namespace groupsgd::kernels::detail::gpu
