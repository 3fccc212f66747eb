// CUDA backend vs the CPU reference: random inputs, odd sizes and misaligned pointers, every
// output element compared. Without a usable GPU (or in a build without CUDA) every test case
// here is marked skipped by doctest, and CTest reports the whole executable as skipped.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "groupsgd/kernels/compression.h"
#include "groupsgd/kernels/device.h"
#include "groupsgd/kernels/ops.h"
#include "groupsgd/kernels/optimizer.h"
#include "test_util.h"

using namespace groupsgd::kernels;
using groupsgd::kernels::testing::randomVector;

namespace {

// Evaluated once, during static initialisation, by the skip decorators below.
bool noGpu() {
  static const bool none = [] {
    std::string why;
    const bool ok = cudaAvailable(&why);
    if (!ok) std::fprintf(stderr, "cuda parity tests skipped: %s\n", why.c_str());
    return !ok;
  }();
  return none;
}

// Odd sizes: empty, shorter than a float4, a float4 tail of 1..3, several blocks, a grid-
// stride loop (more than kMaxBlocks*256*4 elements).
const std::size_t kSizes[] = {0, 1, 3, 4, 5, 255, 1023, 4097, 65'537, (std::size_t{1} << 22) + 3};

// Offsets in floats: 0 keeps cudaMalloc's alignment (float4 path), 1 forces the scalar path.
const std::size_t kOffsets[] = {0, 1};

// Device copy of a host vector, placed `offset` floats into its allocation.
struct Dev {
  DeviceBuffer buf;
  std::size_t offset = 0;
  std::size_t n = 0;
  float* ptr() const { return buf.floats() + offset; }
};

Dev toDevice(const std::vector<float>& host, std::size_t offset) {
  Dev d;
  d.offset = offset;
  d.n = host.size();
  REQUIRE(d.buf.allocate((host.size() + offset + 1) * sizeof(float)).ok());
  REQUIRE(d.buf.uploadBytes(host.data(), host.size() * sizeof(float), offset * sizeof(float)).ok());
  return d;
}

std::vector<float> toHost(const Dev& d) {
  std::vector<float> host(d.n);
  const KernelStatus st = cuda::synchronize();
  REQUIRE_MESSAGE(st.ok(), st.message);
  REQUIRE(d.buf.downloadBytes(host.data(), d.n * sizeof(float), d.offset * sizeof(float)).ok());
  return host;
}

void requireOk(const KernelStatus& st) { REQUIRE_MESSAGE(st.ok(), st.message); }

// Every element: |got - want| <= rel * scale[i] (scale defaults to |want|), NaN == NaN.
void expectClose(const std::vector<float>& got, const std::vector<float>& want, double rel,
                 const std::vector<float>* scale = nullptr) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    const double s = scale ? (*scale)[i] : std::fabs(want[i]);
    if (!(std::fabs(double(got[i]) - want[i]) <= rel * s + 1e-30)) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad != 0) {
    FAIL_CHECK(bad << " of " << got.size() << " elements differ; first at " << first << ": got "
                   << got[first] << ", want " << want[first]);
  }
}

constexpr double kRel = 1e-6;  // --fmad=false makes them equal; this leaves room for rounding

}  // namespace

TEST_CASE("cuda parity: scale, axpy and subtract match the CPU on odd sizes" *
          doctest::skip(noGpu())) {
  for (std::size_t n : kSizes) {
    for (std::size_t off : kOffsets) {
      CAPTURE(n);
      CAPTURE(off);
      const auto x = randomVector(n, 1 + n), y = randomVector(n, 2 + n);
      auto want = x;
      scale(want, -1.7f);
      Dev dx = toDevice(x, off);
      requireOk(cuda::scale(dx.ptr(), n, -1.7f));
      expectClose(toHost(dx), want, kRel);

      want = y;
      axpy(0.3f, x, want);
      dx = toDevice(x, off);
      Dev dy = toDevice(y, 0);  // mixed alignment too
      requireOk(cuda::axpy(0.3f, dx.ptr(), dy.ptr(), n));
      expectClose(toHost(dy), want, kRel);

      subtract(x, y, want);
      dy = toDevice(y, off);
      Dev dout = toDevice(std::vector<float>(n, 9.0f), off);
      requireOk(cuda::subtract(dx.ptr(), dy.ptr(), dout.ptr(), n));
      std::vector<float> mag(n);
      for (std::size_t i = 0; i < n; ++i) mag[i] = std::fabs(x[i]) + std::fabs(y[i]);
      expectClose(toHost(dout), want, kRel, &mag);
    }
  }
}

TEST_CASE("cuda parity: rebase with and without a cut matches the CPU on odd sizes" *
          doctest::skip(noGpu())) {
  for (std::size_t n : kSizes) {
    for (std::size_t off : kOffsets) {
      CAPTURE(n);
      CAPTURE(off);
      const auto central = randomVector(n, 1 + n), base = randomVector(n, 2 + n),
                 cut = randomVector(n, 3 + n), start = randomVector(n, 4 + n);
      std::vector<float> mag(n);
      for (std::size_t i = 0; i < n; ++i) {
        mag[i] =
            std::fabs(central[i]) + std::fabs(base[i]) + std::fabs(cut[i]) + std::fabs(start[i]);
      }
      Dev dc = toDevice(central, off), db = toDevice(base, off), dk = toDevice(cut, 0);
      for (const bool with_cut : {false, true}) {
        CAPTURE(with_cut);
        auto want = start;
        rebase(central, base, with_cut ? std::span<const float>(cut) : std::span<const float>(),
               want);
        Dev dr = toDevice(start, off);
        requireOk(cuda::rebase(dc.ptr(), db.ptr(), with_cut ? dk.ptr() : nullptr, dr.ptr(), n));
        expectClose(toHost(dr), want, kRel, &mag);
      }
    }
  }
}

TEST_CASE("cuda parity: weightedSum of 0, 1, 8 and 20 inputs matches the CPU" *
          doctest::skip(noGpu())) {
  for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{4099}, std::size_t{300'001}}) {
    for (std::size_t count : {0, 1, 8, 20}) {  // 20 > 16 inputs per launch: two launches
      for (std::size_t off : kOffsets) {
        CAPTURE(n);
        CAPTURE(count);
        CAPTURE(off);
        std::vector<std::vector<float>> host;
        std::vector<Dev> dev;
        std::vector<std::span<const float>> spans;
        std::vector<const float*> ptrs;
        const auto weights = randomVector(count, 77, 0.0f, 1.0f);
        for (std::size_t k = 0; k < count; ++k) host.push_back(randomVector(n, 10 * k + n));
        for (std::size_t k = 0; k < count; ++k) {
          dev.push_back(toDevice(host[k], k == 3 ? off : 0));
          spans.emplace_back(host[k]);
          ptrs.push_back(dev.back().ptr());
        }
        std::vector<float> want(n);
        weightedSum(spans, weights, want);
        Dev dout = toDevice(std::vector<float>(n, 5.0f), off);
        requireOk(cuda::weightedSum(ptrs, weights, dout.ptr(), n));
        // Bound by the sum of |w_k x_k|: the result itself can cancel to near zero.
        std::vector<float> mag(n, 0.0f);
        for (std::size_t k = 0; k < count; ++k)
          for (std::size_t i = 0; i < n; ++i) mag[i] += std::fabs(weights[k] * host[k][i]);
        expectClose(toHost(dout), want, kRel, &mag);
      }
    }
  }
}

TEST_CASE("cuda parity: weightedSum refuses mismatched inputs and weights" *
          doctest::skip(noGpu())) {
  Dev d = toDevice(std::vector<float>(4, 1.0f), 0);
  const float* ptrs[] = {d.ptr(), d.ptr()};
  const float w[] = {1.0f};
  CHECK(cuda::weightedSum(ptrs, w, d.ptr(), 4).code == KernelStatus::Code::kInvalidArgument);
}

TEST_CASE("cuda parity: copy, countNonFinite and sumSquares match the CPU" *
          doctest::skip(noGpu())) {
  for (std::size_t n : kSizes) {
    for (std::size_t off : kOffsets) {
      CAPTURE(n);
      CAPTURE(off);
      auto x = randomVector(n, 3 + n, -4.0f, 4.0f);
      for (std::size_t i = 0; i < n; i += 997) x[i] = std::numeric_limits<float>::quiet_NaN();
      for (std::size_t i = 5; i < n; i += 1499) x[i] = -std::numeric_limits<float>::infinity();
      Dev dx = toDevice(x, off);
      std::size_t count = 12345;
      requireOk(cuda::countNonFinite(dx.ptr(), n, &count));
      CHECK(count == countNonFinite(x));

      Dev dcopy = toDevice(std::vector<float>(n, 0.0f), off ^ 1);
      requireOk(cuda::copy(dx.ptr(), dcopy.ptr(), n));
      const auto copied = toHost(dcopy);
      CHECK(std::memcmp(copied.data(), x.data(), n * sizeof(float)) == 0);

      for (float& v : x)
        if (!std::isfinite(v)) v = 0.5f;
      dx = toDevice(x, off);
      double ss = -1.0;
      requireOk(cuda::sumSquares(dx.ptr(), n, &ss));
      const double want = sumSquares(x);
      CHECK(std::fabs(ss - want) <= 1e-12 * want);
    }
  }
}

TEST_CASE("cuda parity: sgd, momentum and nesterov steps match the CPU optimizer" *
          doctest::skip(noGpu())) {
  for (OptimizerKind kind :
       {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kNesterov}) {
    for (std::size_t n :
         {std::size_t{1}, std::size_t{6}, std::size_t{10'003}, (std::size_t{1} << 21) + 1}) {
      for (std::size_t off : kOffsets) {
        CAPTURE(std::string(optimizerKindName(kind)));
        CAPTURE(n);
        CAPTURE(off);
        const OptimizerConfig cfg{kind, 0.05f, 0.9f, 1e-3f};
        auto params = randomVector(n, 4 + n);
        Optimizer cpu(cfg, n);
        Dev dp = toDevice(params, off);
        Dev dv = toDevice(std::vector<float>(n, 0.0f), off);
        std::vector<float> mag(n);
        for (int step = 0; step < 3; ++step) {
          const auto grad = randomVector(n, 100 * step + n);
          Dev dg = toDevice(grad, off);
          for (std::size_t i = 0; i < n; ++i)
            mag[i] = std::fabs(params[i]) + 2 * cfg.lr * (std::fabs(grad[i]) + 1);
          cpu.step(params, grad);
          requireOk(cuda::optimizerStep(cfg, dp.ptr(), dg.ptr(),
                                        kind == OptimizerKind::kSgd ? nullptr : dv.ptr(), n));
        }
        expectClose(toHost(dp), params, 1e-5, &mag);
      }
    }
  }
}

TEST_CASE("cuda parity: adam and adamw steps and moments match the CPU optimizer" *
          doctest::skip(noGpu())) {
  for (OptimizerKind kind : {OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    for (std::size_t n :
         {std::size_t{1}, std::size_t{6}, std::size_t{10'003}, (std::size_t{1} << 21) + 1}) {
      for (std::size_t off : kOffsets) {
        CAPTURE(std::string(optimizerKindName(kind)));
        CAPTURE(n);
        CAPTURE(off);
        const OptimizerConfig cfg{kind, 1e-3f, 0.0f, 1e-2f, 0.9f, 0.999f, 1e-8f};
        auto params = randomVector(n, 7 + n);
        Optimizer cpu(cfg, n);
        Dev dp = toDevice(params, off);
        Dev ds = toDevice(std::vector<float>(2 * n, 0.0f), off);
        std::vector<float> mag(n);
        for (std::uint64_t step = 1; step <= 3; ++step) {
          const auto grad = randomVector(n, 100 * step + n);
          Dev dg = toDevice(grad, off);
          for (std::size_t i = 0; i < n; ++i) mag[i] = std::fabs(params[i]) + 1;
          cpu.step(params, grad);
          requireOk(cuda::optimizerStep(cfg, dp.ptr(), dg.ptr(), ds.ptr(), n, step));
        }
        expectClose(toHost(dp), params, 1e-6, &mag);
        const std::vector<float> cpu_state(cpu.state().begin(), cpu.state().end());
        expectClose(toHost(ds), cpu_state, 1e-5);
      }
    }
  }
  Dev d = toDevice(std::vector<float>(8, 1.0f), 0);
  const OptimizerConfig adam{OptimizerKind::kAdam, 1e-3f, 0.0f, 0.0f};
  CHECK(cuda::optimizerStep(adam, d.ptr(), d.ptr(), d.ptr(), 4, 0).code ==
        KernelStatus::Code::kInvalidArgument);  // no step count: no bias correction
}

TEST_CASE("cuda parity: momentum without a velocity buffer is refused" * doctest::skip(noGpu())) {
  Dev d = toDevice(std::vector<float>(4, 1.0f), 0);
  const KernelStatus st = cuda::optimizerStep({OptimizerKind::kMomentum, 0.1f, 0.9f, 0.0f}, d.ptr(),
                                              d.ptr(), nullptr, 4);
  CHECK(st.code == KernelStatus::Code::kInvalidArgument);
}

TEST_CASE("cuda parity: fp16 encode and decode are bit-identical to the CPU codec" *
          doctest::skip(noGpu())) {
  for (std::size_t n : kSizes) {
    for (std::size_t off : kOffsets) {
      CAPTURE(n);
      CAPTURE(off);
      auto x = randomVector(n, 6 + n, -70000.0f, 70000.0f);
      const float specials[] = {0.0f,
                                -0.0f,
                                0x1p-24f,
                                0x1p-25f,
                                0x1.8p-25f,
                                65504.0f,
                                65520.0f,
                                std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN(),
                                1e-6f,
                                -3e-5f};
      for (std::size_t i = 0; i < n; i += 3) x[i] *= 1e-8f;  // subnormal halves
      for (std::size_t i = 0; i < std::min<std::size_t>(n, std::size(specials)); ++i)
        x[i] = specials[i];
      std::vector<std::uint16_t> want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = floatToHalf(x[i]);

      Dev dx = toDevice(x, off);
      DeviceBuffer dh;
      REQUIRE(dh.allocate((n + 4) * sizeof(std::uint16_t)).ok());
      auto* h = static_cast<std::uint16_t*>(dh.data()) + off;  // off 1: 2-byte aligned only
      requireOk(cuda::encodeFp16(dx.ptr(), h, n));
      requireOk(cuda::synchronize());
      std::vector<std::uint16_t> got(n);
      REQUIRE(dh.downloadBytes(got.data(), n * 2, off * 2).ok());
      CHECK(got == want);

      Dev dy = toDevice(std::vector<float>(n, 0.0f), off);
      requireOk(cuda::decodeFp16(h, dy.ptr(), n));
      const auto y = toHost(dy);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const float w = halfToFloat(want[i]);
        bad += std::memcmp(&w, &y[i], sizeof w) != 0;
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("cuda parity: device buffers check copy ranges and dispatch by backend" *
          doctest::skip(noGpu())) {
  DeviceBuffer b;
  REQUIRE(b.allocate(16).ok());
  float host[8] = {};
  CHECK(b.downloadBytes(host, 20).code == KernelStatus::Code::kInvalidArgument);
  CHECK(b.uploadBytes(host, 8, 12).code == KernelStatus::Code::kInvalidArgument);
  DeviceBuffer moved = std::move(b);
  CHECK(b.data() == nullptr);
  CHECK(moved.bytes() == 16);

  const auto x = randomVector(1001, 8);
  auto y = randomVector(1001, 9);
  Dev dx = toDevice(x, 0), dy = toDevice(y, 0);
  requireOk(axpy(Backend::kCuda, 2.0f, dx.ptr(), dy.ptr(), x.size()));
  requireOk(axpy(Backend::kCpu, 2.0f, x.data(), y.data(), x.size()));
  expectClose(toHost(dy), y, kRel);
  double ss_gpu = 0, ss_cpu = 0;
  requireOk(sumSquares(Backend::kCuda, dy.ptr(), y.size(), &ss_gpu));
  requireOk(sumSquares(Backend::kCpu, y.data(), y.size(), &ss_cpu));
  CHECK(ss_gpu == doctest::Approx(ss_cpu).epsilon(1e-12));
}
