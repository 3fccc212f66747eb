// Device discovery, DeviceBuffer and synchronize on the CUDA runtime API.
#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "cuda_check.h"
#include "groupsgd/kernels/device.h"

namespace groupsgd::kernels {

using detail::cudaStatus;

bool cudaAvailable(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) *why = "no usable CUDA device: " + cudaStatus(err, "cudaGetDeviceCount").message;
    cudaGetLastError();  // clear the (non-sticky) error so later calls report their own
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  if (why) why->clear();
  return true;
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::release() {
  // A failing cudaFree (device lost) cannot be reported from a destructor; the memory is
  // gone with the context anyway.
  if (ptr_ != nullptr) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

KernelStatus DeviceBuffer::allocate(std::size_t bytes) {
  release();
  if (bytes == 0) return KernelStatus::success();
  void* p = nullptr;
  GROUPSGD_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  ptr_ = p;
  bytes_ = bytes;
  return KernelStatus::success();
}

KernelStatus DeviceBuffer::upload(std::span<const float> host) {
  if (KernelStatus s = allocate(host.size_bytes()); !s.ok()) return s;
  return uploadBytes(host.data(), host.size_bytes());
}

namespace {

KernelStatus checkRange(std::size_t offset, std::size_t bytes, std::size_t size) {
  if (offset > size || bytes > size - offset) {
    return KernelStatus::error(KernelStatus::Code::kInvalidArgument,
                               "device copy of " + std::to_string(bytes) + " bytes at offset " +
                                   std::to_string(offset) + " overruns a buffer of " +
                                   std::to_string(size) + " bytes");
  }
  return KernelStatus::success();
}

}  // namespace

KernelStatus DeviceBuffer::uploadBytes(const void* host, std::size_t bytes, std::size_t offset) {
  if (KernelStatus s = checkRange(offset, bytes, bytes_); !s.ok()) return s;
  if (bytes == 0) return KernelStatus::success();
  GROUPSGD_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(static_cast<char*>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice));
  return KernelStatus::success();
}

KernelStatus DeviceBuffer::downloadBytes(void* host, std::size_t bytes, std::size_t offset) const {
  if (KernelStatus s = checkRange(offset, bytes, bytes_); !s.ok()) return s;
  if (bytes == 0) return KernelStatus::success();
  GROUPSGD_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(host, static_cast<const char*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost));
  return KernelStatus::success();
}

KernelStatus DeviceBuffer::download(std::span<float> host) const {
  return downloadBytes(host.data(), host.size_bytes());
}

namespace cuda {

KernelStatus synchronize() {
  GROUPSGD_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  GROUPSGD_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return KernelStatus::success();
}

}  // namespace cuda
}  // namespace groupsgd::kernels
