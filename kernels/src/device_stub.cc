// The CUDA interface of device.h in a build without CUDA: nothing is available and every
// call says so, so callers need no #ifdefs.
#include <utility>

#include "groupsgd/kernels/device.h"

namespace groupsgd::kernels {
namespace {

constexpr const char* kNoCuda = "built without CUDA";

KernelStatus unavailable() {
  return KernelStatus::error(KernelStatus::Code::kUnavailable, kNoCuda);
}

}  // namespace

bool cudaAvailable(std::string* why) {
  if (why) *why = kNoCuda;
  return false;
}

DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  ptr_ = std::exchange(other.ptr_, nullptr);
  bytes_ = std::exchange(other.bytes_, 0);
  return *this;
}
void DeviceBuffer::release() {}
KernelStatus DeviceBuffer::allocate(std::size_t) { return unavailable(); }
KernelStatus DeviceBuffer::upload(std::span<const float>) { return unavailable(); }
KernelStatus DeviceBuffer::uploadBytes(const void*, std::size_t, std::size_t) {
  return unavailable();
}
KernelStatus DeviceBuffer::downloadBytes(void*, std::size_t, std::size_t) const {
  return unavailable();
}
KernelStatus DeviceBuffer::download(std::span<float>) const { return unavailable(); }

namespace cuda {

KernelStatus scale(float*, std::size_t, float) { return unavailable(); }
KernelStatus axpy(float, const float*, float*, std::size_t) { return unavailable(); }
KernelStatus weightedSum(std::span<const float* const>, std::span<const float>, float*,
                         std::size_t) {
  return unavailable();
}
KernelStatus copy(const float*, float*, std::size_t) { return unavailable(); }
KernelStatus subtract(const float*, const float*, float*, std::size_t) { return unavailable(); }
KernelStatus rebase(const float*, const float*, const float*, float*, std::size_t) {
  return unavailable();
}
KernelStatus countNonFinite(const float*, std::size_t, std::size_t*) { return unavailable(); }
KernelStatus sumSquares(const float*, std::size_t, double*) { return unavailable(); }
KernelStatus optimizerStep(const OptimizerConfig&, float*, const float*, float*, std::size_t,
                           std::uint64_t) {
  return unavailable();
}
KernelStatus encodeFp16(const float*, std::uint16_t*, std::size_t) { return unavailable(); }
KernelStatus decodeFp16(const std::uint16_t*, float*, std::size_t) { return unavailable(); }
KernelStatus synchronize() { return unavailable(); }

}  // namespace cuda
}  // namespace groupsgd::kernels
