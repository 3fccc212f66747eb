// cuBLAS and cuDNN results as KernelStatus, and a grow-only device scratch buffer, for the
// CUDA models. Thread rule: plain functions; a DeviceScratch belongs to one model.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include <cstddef>
#include <string>

#include "../cuda/cuda_check.h"
#include "groupsgd/kernels/device.h"
#include "groupsgd/kernels/kernel_status.h"

namespace groupsgd::kernels::detail {

inline KernelStatus blasStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return KernelStatus::success();
  return KernelStatus::error(KernelStatus::Code::kInternal,
                             std::string(what) + ": " + cublasGetStatusString(s));
}

inline KernelStatus dnnStatus(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return KernelStatus::success();
  return KernelStatus::error(KernelStatus::Code::kInternal,
                             std::string(what) + ": " + cudnnGetErrorString(s));
}

// Device floats that only grow, so each step allocates nothing once the batch is known.
class DeviceScratch {
 public:
  KernelStatus reserve(std::size_t floats) {
    if (buf_.floatCount() >= floats) return KernelStatus::success();
    return buf_.allocate(floats * sizeof(float));
  }
  float* get() const { return buf_.floats(); }

 private:
  DeviceBuffer buf_;
};

}  // namespace groupsgd::kernels::detail

#define GSGD_GPU_TRY(expr)                                                  \
  do {                                                                      \
    if (::groupsgd::kernels::KernelStatus s_ = (expr); !s_.ok()) return s_; \
  } while (0)
#define GSGD_BLAS_TRY(expr) GSGD_GPU_TRY(::groupsgd::kernels::detail::blasStatus((expr), #expr))
#define GSGD_DNN_TRY(expr) GSGD_GPU_TRY(::groupsgd::kernels::detail::dnnStatus((expr), #expr))
#define GSGD_CUDA_TRY(expr) GSGD_GPU_TRY(::groupsgd::kernels::detail::cudaStatus((expr), #expr))
