#include "cuda_model_base.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#include "../layer_math.h"
#include "model_kernels.h"

namespace groupsgd::kernels::detail {

CudaModelBase::~CudaModelBase() {
  if (blas_ != nullptr) {
    cudaSetDevice(ordinal_);
    cublasDestroy(blas_);
  }
}

KernelStatus CudaModelBase::open(int ordinal) {
  ordinal_ = ordinal;
  GSGD_CUDA_TRY(cudaSetDevice(ordinal));
  GSGD_BLAS_TRY(cublasCreate(&blas_));
  // FP32 arithmetic: the default math mode never uses TF32 tensor cores for SGEMM.
  GSGD_BLAS_TRY(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
  return setup();
}

void CudaModelBase::fail(KernelStatus st) {
  if (error_.ok()) error_ = std::move(st);
}

KernelStatus CudaModelBase::upload(std::span<const float> params, const float* x,
                                   std::size_t batch) {
  GSGD_CUDA_TRY(cudaSetDevice(ordinal_));
  const std::size_t n = params.size(), xs = batch * inputDim();
  GSGD_GPU_TRY(p_.reserve(n));
  GSGD_GPU_TRY(g_.reserve(n));
  GSGD_GPU_TRY(x_.reserve(xs));
  GSGD_CUDA_TRY(cudaMemcpy(p_.get(), params.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  GSGD_CUDA_TRY(cudaMemcpy(x_.get(), x, xs * sizeof(float), cudaMemcpyHostToDevice));
  return KernelStatus::success();
}

KernelStatus CudaModelBase::step(std::span<const float> params, const float* x,
                                 const std::int32_t* labels, std::size_t batch,
                                 std::span<float> grad, float* loss) {
  // The CPU models assert on a bad label; on the device it would read out of bounds.
  for (std::size_t i = 0; i < batch; ++i) {
    if (labels[i] < 0 || static_cast<std::size_t>(labels[i]) >= numClasses()) {
      return KernelStatus::error(KernelStatus::Code::kInvalidArgument,
                                 "label " + std::to_string(labels[i]) + " at " + std::to_string(i) +
                                     " is not a class of this model");
    }
  }
  GSGD_GPU_TRY(upload(params, x, batch));
  // Labels travel as int32 in a float-sized scratch (same size, 4 bytes each).
  static_assert(sizeof(std::int32_t) == sizeof(float));
  GSGD_GPU_TRY(labels_.reserve(batch));
  GSGD_GPU_TRY(row_loss_.reserve(2 * batch));  // doubles
  GSGD_CUDA_TRY(
      cudaMemcpy(labels_.get(), labels, batch * sizeof(std::int32_t), cudaMemcpyHostToDevice));
  // Bias gradients sum over up to batch × (largest map) rows; the subclass asks for them
  // through ones(), sized here generously once: rows never exceed x's element count.
  const std::size_t rows = batch * std::max<std::size_t>(inputDim(), 1);
  if (ones_count_ < rows) {
    GSGD_GPU_TRY(ones_.reserve(rows));
    GSGD_GPU_TRY(gpu::fill(ones_.get(), rows, 1.0f));
    ones_count_ = rows;
  }
  float* z = nullptr;
  GSGD_GPU_TRY(forward(batch, &z));
  auto* row_loss = reinterpret_cast<double*>(row_loss_.get());
  GSGD_GPU_TRY(gpu::softmaxXentBackward(z, reinterpret_cast<const std::int32_t*>(labels_.get()),
                                        batch, numClasses(), row_loss));
  GSGD_GPU_TRY(backward(batch, z));
  host_row_loss_.resize(batch);
  GSGD_CUDA_TRY(
      cudaMemcpy(host_row_loss_.data(), row_loss, batch * sizeof(double), cudaMemcpyDeviceToHost));
  GSGD_CUDA_TRY(
      cudaMemcpy(grad.data(), g_.get(), grad.size() * sizeof(float), cudaMemcpyDeviceToHost));
  const double total = std::accumulate(host_row_loss_.begin(), host_row_loss_.end(), 0.0);
  *loss = static_cast<float>(total / static_cast<double>(batch));
  return KernelStatus::success();
}

float CudaModelBase::lossAndGrad(std::span<const float> params, const float* x,
                                 const std::int32_t* labels, std::size_t batch,
                                 std::span<float> grad) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  if (batch == 0 && error_.ok()) {
    std::fill(grad.begin(), grad.end(), 0.0f);
    return 0.0f;
  }
  float loss = kNaN;
  if (error_.ok()) fail(step(params, x, labels, batch, grad, &loss));
  if (!error_.ok()) {
    // A gradient nobody may mistake for a real one: the group PS rejects non-finite pushes.
    std::fill(grad.begin(), grad.end(), kNaN);
    return kNaN;
  }
  return loss;
}

KernelStatus CudaModelBase::logits(std::span<const float> params, const float* x, std::size_t batch,
                                   std::int32_t* out_labels) {
  GSGD_GPU_TRY(upload(params, x, batch));
  float* z = nullptr;
  GSGD_GPU_TRY(forward(batch, &z));
  host_logits_.resize(batch * numClasses());
  GSGD_CUDA_TRY(cudaMemcpy(host_logits_.data(), z, host_logits_.size() * sizeof(float),
                           cudaMemcpyDeviceToHost));
  argmaxRows(host_logits_.data(), batch, numClasses(), out_labels);
  return KernelStatus::success();
}

void CudaModelBase::predict(std::span<const float> params, const float* x, std::size_t batch,
                            std::int32_t* out_labels) {
  if (batch == 0) return;
  if (error_.ok()) fail(logits(params, x, batch, out_labels));
  if (!error_.ok()) std::fill_n(out_labels, batch, 0);
}

}  // namespace groupsgd::kernels::detail
