// CUDA backend of the vector ops, the optimizer step and the fp16 codec, on device memory.
// Built only when CMake finds nvcc and the CUDA toolkit (GROUPSGD_HAVE_CUDA is then
// defined); otherwise every function here reports kUnavailable "built without CUDA", so
// callers compile and run the same either way. Nothing links libcuda: a binary starts on a
// machine without a GPU and cudaAvailable() says why it cannot use one.
//
// Semantics match the CPU reference (ops.h, optimizer.h, compression.h); tests compare
// every output element. Kernels are enqueued on the legacy default stream in call order and
// return once launched; functions that return a host value (countNonFinite, sumSquares),
// download and synchronize() wait for the device. An error raised asynchronously by a kernel
// surfaces from the next call that synchronizes.
// Thread rule: functions are reentrant; a DeviceBuffer is owned by one thread at a time.
// No exception crosses this interface: every CUDA call is checked and becomes a KernelStatus.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "groupsgd/kernels/kernel_status.h"
#include "groupsgd/kernels/optimizer.h"

namespace groupsgd::kernels {

// Where a buffer lives.
enum class Backend { kCpu, kCuda };

// Names are "cpu", "cuda"; parse returns false on anything else.
bool parseBackend(std::string_view text, Backend* out);
const char* backendName(Backend backend);

// True when this build has CUDA and the runtime sees at least one device. Otherwise false,
// and *why (when why is not null) says why: "built without CUDA", "no CUDA device", or the
// runtime's error (no driver, ...).
bool cudaAvailable(std::string* why);

// Device memory owned by one object: cudaMalloc on allocate, cudaFree on destruction.
// Move-only. A default-constructed or moved-from buffer is empty (data() null, bytes() 0).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Frees what was held and allocates `bytes` (uninitialised). 0 bytes gives an empty buffer.
  KernelStatus allocate(std::size_t bytes);
  // Convenience: allocate n floats and copy host into them.
  KernelStatus upload(std::span<const float> host);
  // Host -> device and device -> host copies of `bytes` at byte `offset` (range checked:
  // kInvalidArgument if it does not fit). Both wait for completion.
  KernelStatus uploadBytes(const void* host, std::size_t bytes, std::size_t offset = 0);
  KernelStatus downloadBytes(void* host, std::size_t bytes, std::size_t offset = 0) const;
  // Copies the first host.size() floats to host.
  KernelStatus download(std::span<float> host) const;

  void* data() const { return ptr_; }
  float* floats() const { return static_cast<float*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  std::size_t floatCount() const { return bytes_ / sizeof(float); }

 private:
  void release();
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// The CUDA implementation; every pointer is device memory of at least n elements, with the
// same in-place and overlap rules as ops.h. A pointer may be null only when n is 0.
namespace cuda {

// x *= a
KernelStatus scale(float* x, std::size_t n, float a);
// y += a*x
KernelStatus axpy(float a, const float* x, float* y, std::size_t n);
// out = sum_i weights[i]*inputs[i]; zeros when there are no inputs. inputs holds device
// pointers (the array itself is host memory); weights are host values.
KernelStatus weightedSum(std::span<const float* const> inputs, std::span<const float> weights,
                         float* out, std::size_t n);
// dst = src (device-to-device cudaMemcpyAsync)
KernelStatus copy(const float* src, float* dst, std::size_t n);
// out = a - b
KernelStatus subtract(const float* a, const float* b, float* out, std::size_t n);
// replica = central + (replica - base - cut), as ops.h's rebase; cut may be null (no cut).
KernelStatus rebase(const float* central, const float* base, const float* cut, float* replica,
                    std::size_t n);
// Number of NaN/Inf entries; waits for the result.
KernelStatus countNonFinite(const float* x, std::size_t n, std::size_t* out);
// sum x[i]^2 accumulated in double (block-wise; the order differs from the CPU's, so the
// results agree to rounding, not bit for bit). Waits for the result.
KernelStatus sumSquares(const float* x, std::size_t n, double* out);
// One optimizer step with the semantics of Optimizer::step (optimizer.h) at grad_scale 1
// and without no-decay ranges (call it per range, weight_decay 0 on those). state holds
// optimizerStateBuffers(cfg.kind) * n floats laid out as Optimizer::state() (momentum: the
// velocity; adam/adamw: first then second moments; start at zero) and may be null for sgd.
// step: the steps taken including this one, >= 1 for adam/adamw (bias correction); the
// other kinds ignore it.
KernelStatus optimizerStep(const OptimizerConfig& cfg, float* params, const float* grad,
                           float* state, std::size_t n, std::uint64_t step = 1);
// fp16 codec, bit-identical to floatToHalf/halfToFloat (compression.h).
KernelStatus encodeFp16(const float* x, std::uint16_t* out, std::size_t n);
KernelStatus decodeFp16(const std::uint16_t* in, float* out, std::size_t n);
// Waits for all enqueued work; returns the first pending asynchronous error.
KernelStatus synchronize();

}  // namespace cuda

// Dispatch on where the buffers live: kCpu calls ops.h on host pointers (never fails),
// kCuda calls cuda:: on device pointers.
KernelStatus axpy(Backend backend, float a, const float* x, float* y, std::size_t n);
KernelStatus scale(Backend backend, float* x, std::size_t n, float a);
KernelStatus rebase(Backend backend, const float* central, const float* base, const float* cut,
                    float* replica, std::size_t n);
KernelStatus weightedSum(Backend backend, std::span<const float* const> inputs,
                         std::span<const float> weights, float* out, std::size_t n);
KernelStatus countNonFinite(Backend backend, const float* x, std::size_t n, std::size_t* out);
KernelStatus sumSquares(Backend backend, const float* x, std::size_t n, double* out);

}  // namespace groupsgd::kernels
