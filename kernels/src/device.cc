// Backend names and the host/device dispatch of device.h (both builds).
#include "groupsgd/kernels/device.h"

#include <string>
#include <vector>

#include "groupsgd/base/enum_names.h"
#include "groupsgd/kernels/ops.h"

namespace groupsgd::kernels {

constexpr std::array<base::EnumName<Backend>, 2> kBackendNames{{
    {Backend::kCpu, "cpu"},
    {Backend::kCuda, "cuda"},
}};

bool parseBackend(std::string_view text, Backend* out) {
  return base::parseInto(kBackendNames, text, out);
}

const char* backendName(Backend backend) { return base::nameOf(kBackendNames, backend); }

KernelStatus axpy(Backend backend, float a, const float* x, float* y, std::size_t n) {
  if (backend == Backend::kCuda) return cuda::axpy(a, x, y, n);
  axpy(a, std::span<const float>(x, n), std::span<float>(y, n));
  return KernelStatus::success();
}

KernelStatus scale(Backend backend, float* x, std::size_t n, float a) {
  if (backend == Backend::kCuda) return cuda::scale(x, n, a);
  scale(std::span<float>(x, n), a);
  return KernelStatus::success();
}

KernelStatus rebase(Backend backend, const float* central, const float* base, const float* cut,
                    float* replica, std::size_t n) {
  if (backend == Backend::kCuda) return cuda::rebase(central, base, cut, replica, n);
  rebase(std::span<const float>(central, n), std::span<const float>(base, n),
         cut ? std::span<const float>(cut, n) : std::span<const float>(),
         std::span<float>(replica, n));
  return KernelStatus::success();
}

KernelStatus weightedSum(Backend backend, std::span<const float* const> inputs,
                         std::span<const float> weights, float* out, std::size_t n) {
  if (backend == Backend::kCuda) return cuda::weightedSum(inputs, weights, out, n);
  if (inputs.size() != weights.size()) {
    return KernelStatus::error(KernelStatus::Code::kInvalidArgument,
                               "weightedSum: " + std::to_string(inputs.size()) + " inputs but " +
                                   std::to_string(weights.size()) + " weights");
  }
  std::vector<std::span<const float>> spans;
  spans.reserve(inputs.size());
  for (const float* in : inputs) spans.emplace_back(in, n);
  weightedSum(spans, weights, std::span<float>(out, n));
  return KernelStatus::success();
}

KernelStatus countNonFinite(Backend backend, const float* x, std::size_t n, std::size_t* out) {
  if (backend == Backend::kCuda) return cuda::countNonFinite(x, n, out);
  *out = countNonFinite(std::span<const float>(x, n));
  return KernelStatus::success();
}

KernelStatus sumSquares(Backend backend, const float* x, std::size_t n, double* out) {
  if (backend == Backend::kCuda) return cuda::sumSquares(x, n, out);
  *out = sumSquares(std::span<const float>(x, n));
  return KernelStatus::success();
}

}  // namespace groupsgd::kernels
