// The C entry points of libgroupsgd-gpu-models.so, shared by the library and its loader
// (model_device.cc). C linkage so dlsym finds them by these names. The library and the
// program must come from the same build (same compiler, same Model class): the version
// below is checked first, and the loader refuses a library that does not match.
#pragma once

#include <cstddef>

namespace groupsgd::kernels {
class Model;
}

// Bump when Model or these signatures change.
#define GROUPSGD_GPU_MODELS_ABI 1

extern "C" {
// Returns GROUPSGD_GPU_MODELS_ABI.
typedef int (*GroupsgdGpuModelsAbiFn)();
// Checks device `ordinal` and makes it current. 0 on success; else a KernelStatus code
// (as int) and a message in err (NUL-terminated, at most err_len bytes).
typedef int (*GroupsgdGpuModelsProbeFn)(int ordinal, char* err, std::size_t err_len);
// Creates the CUDA model `kind` (a kernels::ModelKind as int) on device `ordinal`. On
// success *out owns a new Model (delete it through the pointer: Model has a virtual
// destructor) and 0 is returned; else a code and a message as above.
typedef int (*GroupsgdGpuModelsMakeFn)(int kind, std::size_t input_dim, std::size_t classes,
                                       int ordinal, groupsgd::kernels::Model** out, char* err,
                                       std::size_t err_len);
}

#define GROUPSGD_GPU_MODELS_ABI_SYMBOL "groupsgd_gpu_models_abi"
#define GROUPSGD_GPU_MODELS_PROBE_SYMBOL "groupsgd_gpu_models_probe"
#define GROUPSGD_GPU_MODELS_MAKE_SYMBOL "groupsgd_gpu_models_make"
