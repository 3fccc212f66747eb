// The parts of device.h that run everywhere: names, CPU dispatch, and how a machine without
// a GPU (or a build without CUDA) answers. GPU behaviour is in cuda_parity_test.cc.
#include "groupsgd/kernels/device.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "groupsgd/kernels/ops.h"
#include "test_util.h"

using namespace groupsgd::kernels;

TEST_CASE("device: backend names round-trip and unknown names are refused") {
  for (Backend b : {Backend::kCpu, Backend::kCuda}) {
    Backend parsed{};
    REQUIRE(parseBackend(backendName(b), &parsed));
    CHECK(parsed == b);
  }
  Backend unused{};
  CHECK_FALSE(parseBackend("gpu", &unused));
}

TEST_CASE("device: the CPU backend dispatches to the reference ops") {
  const auto x = testing::randomVector(100, 1);
  auto y = testing::randomVector(100, 2);
  auto want = y;
  axpy(0.5f, x, want);
  REQUIRE(axpy(Backend::kCpu, 0.5f, x.data(), y.data(), y.size()).ok());
  CHECK(y == want);
  std::vector<float> out(100);
  const float* ptrs[] = {x.data(), y.data()};
  const float w[] = {1.0f, -1.0f};
  REQUIRE(weightedSum(Backend::kCpu, ptrs, w, out.data(), out.size()).ok());
  std::vector<float> diff(100);
  subtract(x, y, diff);
  CHECK(out == diff);
  CHECK(weightedSum(Backend::kCpu, ptrs, std::span<const float>(w, 1), out.data(), 100).code ==
        KernelStatus::Code::kInvalidArgument);
  std::size_t bad = 1;
  REQUIRE(countNonFinite(Backend::kCpu, x.data(), x.size(), &bad).ok());
  CHECK(bad == 0);
}

TEST_CASE("device: without a usable GPU, CUDA calls fail cleanly and say why") {
  std::string why;
  if (cudaAvailable(&why)) {
    MESSAGE("a CUDA device is present; the no-GPU answers are not exercised here");
    CHECK(why.empty());
    return;
  }
  MESSAGE("cudaAvailable: false: ", why);
  CHECK(!why.empty());
  CHECK(cudaAvailable(nullptr) == false);
  DeviceBuffer b;
  const KernelStatus st = b.allocate(1024);
  CHECK(st.code == KernelStatus::Code::kUnavailable);
  CHECK(!st.message.empty());
  CHECK(b.data() == nullptr);
  std::size_t count = 0;
  float dummy = 0;
  CHECK_FALSE(cuda::countNonFinite(&dummy, 1, &count).ok());
  CHECK_FALSE(axpy(Backend::kCuda, 1.0f, &dummy, &dummy, 1).ok());
#ifndef GROUPSGD_HAVE_CUDA
  CHECK(why == "built without CUDA");
#endif
}
