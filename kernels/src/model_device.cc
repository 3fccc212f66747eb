// Device selection for the models and the loader of libgroupsgd-gpu-models.so. The library
// is opened once per process with dlopen and never closed: the models it creates run its
// code until the process exits.
#include "groupsgd/kernels/model_device.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "gpu_models_abi.h"

namespace groupsgd::kernels {
namespace {

constexpr int kMaxOrdinal = 1023;

KernelStatus unavailable(std::string message) {
  return KernelStatus::error(KernelStatus::Code::kUnavailable, std::move(message));
}

#ifdef GROUPSGD_GPU_MODELS_INSTALL_PATH
// The directory of the running program ("" when /proc/self/exe cannot be read).
std::string programDirectory() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

// Where the library is looked for, in order: the environment override; the install tree of
// this build (a compile definition); the same place relative to the program (bin/../lib/
// groupsgd: a package installed under another prefix than the build was configured for);
// the plain file name (the dynamic loader's search path: LD_LIBRARY_PATH, the program's
// RUNPATH - in the build tree that is build/kernels, set by CMake and removed on install -
// and ld.so.cache).
std::vector<std::string> libraryCandidates() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("GROUPSGD_GPU_MODELS_LIB"); env != nullptr && *env) {
    paths.emplace_back(env);
    return paths;  // an explicit choice is not second-guessed
  }
  paths.emplace_back(GROUPSGD_GPU_MODELS_INSTALL_PATH);
  if (const std::string dir = programDirectory(); !dir.empty()) {
    paths.emplace_back(dir + "/" + GROUPSGD_GPU_MODELS_FROM_BINDIR);
  }
  paths.emplace_back(kGpuModelsLibrary);
  return paths;
}

struct Loaded {
  KernelStatus status;
  GroupsgdGpuModelsProbeFn probe = nullptr;
  GroupsgdGpuModelsMakeFn make = nullptr;
};

Loaded load() {
  Loaded l;
  std::string tried;
  void* handle = nullptr;
  for (const std::string& path : libraryCandidates()) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    const char* why = dlerror();
    tried += (tried.empty() ? "" : "; ") + std::string(why ? why : path.c_str());
  }
  if (handle == nullptr) {
    l.status = unavailable(std::string("cannot load ") + kGpuModelsLibrary + ": " + tried);
    return l;
  }
  auto abi =
      reinterpret_cast<GroupsgdGpuModelsAbiFn>(dlsym(handle, GROUPSGD_GPU_MODELS_ABI_SYMBOL));
  l.probe =
      reinterpret_cast<GroupsgdGpuModelsProbeFn>(dlsym(handle, GROUPSGD_GPU_MODELS_PROBE_SYMBOL));
  l.make =
      reinterpret_cast<GroupsgdGpuModelsMakeFn>(dlsym(handle, GROUPSGD_GPU_MODELS_MAKE_SYMBOL));
  if (abi == nullptr || l.probe == nullptr || l.make == nullptr) {
    l.status = unavailable(std::string(kGpuModelsLibrary) + " lacks its entry points");
  } else if (abi() != GROUPSGD_GPU_MODELS_ABI) {
    l.status = unavailable(std::string(kGpuModelsLibrary) + " is from another build (ABI " +
                           std::to_string(abi()) + ", expected " +
                           std::to_string(GROUPSGD_GPU_MODELS_ABI) + ")");
  }
  return l;
}

const Loaded& library() {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  return loaded;
}

KernelStatus fromC(int code, const char* message) {
  if (code == 0) return KernelStatus::success();
  return KernelStatus::error(static_cast<KernelStatus::Code>(code), message);
}
#endif  // GROUPSGD_GPU_MODELS_INSTALL_PATH

}  // namespace

KernelStatus parseModelDevice(std::string_view text, ModelDevice* out) {
  if (text == "cpu") {
    *out = ModelDevice{Backend::kCpu, 0};
    return KernelStatus::success();
  }
  if (text == "cuda") {
    *out = ModelDevice{Backend::kCuda, 0};
    return KernelStatus::success();
  }
  constexpr std::string_view kPrefix = "cuda:";
  if (text.substr(0, kPrefix.size()) == kPrefix) {
    const std::string_view digits = text.substr(kPrefix.size());
    bool good = !digits.empty() && digits.size() <= 4;
    int ordinal = 0;
    for (char c : digits) {
      good = good && c >= '0' && c <= '9';
      if (good) ordinal = ordinal * 10 + (c - '0');
    }
    if (good && ordinal <= kMaxOrdinal) {
      *out = ModelDevice{Backend::kCuda, ordinal};
      return KernelStatus::success();
    }
  }
  return KernelStatus::error(
      KernelStatus::Code::kInvalidArgument,
      "device must be cpu, cuda or cuda:N (N a device number 0-1023), got '" + std::string(text) +
          "'");
}

std::string modelDeviceName(const ModelDevice& device) {
  if (device.backend == Backend::kCpu) return "cpu";
  return "cuda:" + std::to_string(device.index);
}

KernelStatus checkModelDevice(const ModelDevice& device) {
  if (device.backend == Backend::kCpu) return KernelStatus::success();
#ifndef GROUPSGD_GPU_MODELS_INSTALL_PATH
  return unavailable(
      "this build has no CUDA models (it was configured without CUDA, cuBLAS or cuDNN)");
#else
  // The library first, so a broken installation is reported even on a machine without a
  // GPU (and the loading is exercised there by the tests).
  const Loaded& lib = library();
  if (!lib.status.ok()) return lib.status;
  std::string why;
  if (!cudaAvailable(&why)) return unavailable("no usable GPU: " + why);
  char err[512] = {0};
  const int code = lib.probe(device.index, err, sizeof err);
  return fromC(code, err);
#endif
}

KernelStatus makeModelOn(const ModelDevice& device, ModelKind kind, std::size_t input_dim,
                         std::size_t classes, std::unique_ptr<Model>* out) {
  if (kind == ModelKind::kCnn && cnnPooledSide(input_dim) == 0) {
    return KernelStatus::error(
        KernelStatus::Code::kInvalidArgument,
        "the cnn model needs square images of side >= " + std::to_string(kCnnMinSide) + ", got " +
            std::to_string(input_dim) + " features");
  }
  if (device.backend == Backend::kCpu) {
    *out = makeModel(kind, input_dim, classes);
    return KernelStatus::success();
  }
  if (KernelStatus st = checkModelDevice(device); !st.ok()) return st;
#ifndef GROUPSGD_GPU_MODELS_INSTALL_PATH
  return unavailable("unreachable: checkModelDevice accepted a CUDA device without CUDA models");
#else
  char err[512] = {0};
  Model* model = nullptr;
  const int code = library().make(static_cast<int>(kind), input_dim, classes, device.index, &model,
                                  err, sizeof err);
  if (code != 0) return fromC(code, err);
  out->reset(model);
  return KernelStatus::success();
#endif
}

}  // namespace groupsgd::kernels
