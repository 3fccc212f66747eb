// Where a model trains: "cpu" (the reference models of model.h) or "cuda[:N]" (the CUDA
// models: MLP through cuBLAS, CNN through cuDNN + cuBLAS). The CUDA models live in a separate
// shared library, libgroupsgd-gpu-models.so, that is dlopen()ed only when a CUDA device is
// asked for, so programs never link cuBLAS/cuDNN and start the same on machines without a GPU.
// Parameters and gradients stay flat float32 host vectors at the Model interface: a CUDA
// model copies them to and from the device on every call.
// Thread rule: the loader is safe to call from any thread (it loads once); each Model is used
// by one thread at a time, as model.h says.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "groupsgd/kernels/device.h"
#include "groupsgd/kernels/kernel_status.h"
#include "groupsgd/kernels/model.h"

namespace groupsgd::kernels {

struct ModelDevice {
  Backend backend = Backend::kCpu;
  int index = 0;  // CUDA device ordinal; 0 for the CPU
};

// "cpu", "cuda" (device 0) or "cuda:N" with N a decimal ordinal below 1024.
// kInvalidArgument with a message naming the text otherwise.
KernelStatus parseModelDevice(std::string_view text, ModelDevice* out);
// "cpu", "cuda:N".
std::string modelDeviceName(const ModelDevice& device);

// Checks that models can run on `device`: always ok for the CPU; for CUDA, in this order,
// kUnavailable when this build has no CUDA models, when the library cannot be loaded
// (dlerror) or is from another build, when no GPU is usable (the runtime's reason), or when
// the ordinal is out of range.
// Loads the library on first use. Cheap after the first call.
KernelStatus checkModelDevice(const ModelDevice& device);

// makeModel on a device. On success *out holds the model; on failure the status says why
// (checkModelDevice's errors, kInvalidArgument for a CNN input_dim cnnPooledSide rejects,
// or a CUDA/cuBLAS/cuDNN error while setting up).
KernelStatus makeModelOn(const ModelDevice& device, ModelKind kind, std::size_t input_dim,
                         std::size_t classes, std::unique_ptr<Model>* out);

// File name of the CUDA model library; GROUPSGD_GPU_MODELS_LIB in the environment overrides
// where it is looked for (a full path).
inline constexpr const char* kGpuModelsLibrary = "libgroupsgd-gpu-models.so";

}  // namespace groupsgd::kernels
