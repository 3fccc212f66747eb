#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "groupsgd/kernels/gemm.h"
#include "groupsgd/kernels/model.h"
#include "test_util.h"

using namespace groupsgd::kernels;
using groupsgd::kernels::testing::randomVector;

// Reported, not asserted: timings vary by machine and sanitizer. ctest runs this with
// OPENBLAS_NUM_THREADS=1.
namespace {

void timeLossAndGrad(ModelKind kind, std::size_t runs) {
  constexpr std::size_t kBatch = 64;
  auto m = makeModel(kind);
  std::vector<float> params(m->paramCount()), grad(m->paramCount());
  m->init(params, 1);
  auto x = randomVector(kBatch * 784, 2, 0.0f, 1.0f);
  std::vector<std::int32_t> y(kBatch);
  for (std::size_t i = 0; i < kBatch; ++i) y[i] = static_cast<std::int32_t>(i % 10);
  for (int i = 0; i < 5; ++i) m->lossAndGrad(params, x.data(), y.data(), kBatch, grad);  // warm up
  std::vector<double> ms;
  float loss = 0;
  for (std::size_t i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    loss = m->lossAndGrad(params, x.data(), y.data(), kBatch, grad);
    auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  CHECK(std::isfinite(loss));
  MESSAGE(std::string(modelKindName(kind)), " lossAndGrad batch 64: median ", ms[runs / 2],
          " ms, min ", ms.front(), " ms, max ", ms.back(), " ms (",
          std::string(haveBlas() ? "OpenBLAS" : "C++ fallback"), ")");
}

}  // namespace

TEST_CASE("timing: one mlp lossAndGrad at batch 64 (median of 50, reported)") {
  timeLossAndGrad(ModelKind::kMlp, 50);
}

TEST_CASE("timing: one cnn lossAndGrad at batch 64 (median of 20, reported)") {
  timeLossAndGrad(ModelKind::kCnn, 20);
}
