// Turns CUDA runtime errors into KernelStatus, so no CUDA failure escapes as anything else.
// Thread rule: plain functions.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "groupsgd/kernels/kernel_status.h"

namespace groupsgd::kernels::detail {

// kUnavailable for "there is no usable GPU here" errors, kInternal for the rest.
inline KernelStatus cudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return KernelStatus::success();
  const bool no_gpu = err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
                      err == cudaErrorDevicesUnavailable;
  return KernelStatus::error(
      no_gpu ? KernelStatus::Code::kUnavailable : KernelStatus::Code::kInternal,
      std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace groupsgd::kernels::detail

// Returns the KernelStatus of a failed CUDA runtime call from the enclosing function.
#define GROUPSGD_CUDA_RETURN_IF_ERROR(expr)                         \
  do {                                                              \
    if (::groupsgd::kernels::KernelStatus s_ =                      \
            ::groupsgd::kernels::detail::cudaStatus((expr), #expr); \
        !s_.ok()) {                                                 \
      return s_;                                                    \
    }                                                               \
  } while (0)
