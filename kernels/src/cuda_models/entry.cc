// The C entry points of libgroupsgd-gpu-models.so (gpu_models_abi.h). The only symbols the
// library exports; nothing here throws (an allocation failure is reported as kInternal).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <exception>
#include <string>

#include "../gpu_models_abi.h"
#include "cuda_model_base.h"

namespace {

using groupsgd::kernels::KernelStatus;

int report(const KernelStatus& st, char* err, std::size_t err_len) {
  if (err != nullptr && err_len > 0) std::snprintf(err, err_len, "%s", st.message.c_str());
  return static_cast<int>(st.code);
}

KernelStatus probe(int ordinal) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cudaGetLastError();
    return groupsgd::kernels::detail::cudaStatus(e, "cudaGetDeviceCount");
  }
  if (ordinal < 0 || ordinal >= count) {
    return KernelStatus::error(KernelStatus::Code::kUnavailable,
                               "CUDA device " + std::to_string(ordinal) + " does not exist (" +
                                   std::to_string(count) + " device(s) visible)");
  }
  return groupsgd::kernels::detail::cudaStatus(cudaSetDevice(ordinal), "cudaSetDevice");
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int groupsgd_gpu_models_abi() {
  return GROUPSGD_GPU_MODELS_ABI;
}

__attribute__((visibility("default"))) int groupsgd_gpu_models_probe(int ordinal, char* err,
                                                                     std::size_t err_len) {
  return report(probe(ordinal), err, err_len);
}

__attribute__((visibility("default"))) int groupsgd_gpu_models_make(
    int kind, std::size_t input_dim, std::size_t classes, int ordinal,
    groupsgd::kernels::Model** out, char* err, std::size_t err_len) {
  using namespace groupsgd::kernels;
  try {
    if (KernelStatus st = probe(ordinal); !st.ok()) return report(st, err, err_len);
    std::unique_ptr<detail::CudaModelBase> model;
    switch (static_cast<ModelKind>(kind)) {
      case ModelKind::kMlp:
        model = detail::makeCudaMlp(input_dim, classes);
        break;
      case ModelKind::kCnn:
        model = detail::makeCudaCnn(input_dim, classes);
        break;
      default:
        return report(KernelStatus::error(KernelStatus::Code::kInvalidArgument,
                                          std::string("no CUDA implementation of model '") +
                                              modelKindName(static_cast<ModelKind>(kind)) +
                                              "' (mlp and cnn have one)"),
                      err, err_len);
    }
    if (!model) {
      return report(KernelStatus::error(KernelStatus::Code::kInvalidArgument,
                                        "input_dim does not fit the model"),
                    err, err_len);
    }
    if (KernelStatus st = model->open(ordinal); !st.ok()) return report(st, err, err_len);
    *out = model.release();
    return 0;
  } catch (const std::exception& e) {
    return report(KernelStatus::error(KernelStatus::Code::kInternal,
                                      std::string("creating the CUDA model: ") + e.what()),
                  err, err_len);
  }
}

}  // extern "C"
