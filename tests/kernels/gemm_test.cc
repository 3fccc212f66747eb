#include "groupsgd/kernels/gemm.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

using namespace groupsgd::kernels;
using groupsgd::kernels::testing::randomVector;

namespace {

struct Shape {
  std::size_t m, n, k;
};

// Runs one of the two GEMMs on padded (lda > width) random operands against a double loop.
template <typename Gemm>
void checkAgainstNaive(Gemm gemm_fn, Transpose ta, Transpose tb, Shape s, float alpha, float beta) {
  const bool at = ta == Transpose::kYes, bt = tb == Transpose::kYes;
  const std::size_t a_rows = at ? s.k : s.m, a_cols = at ? s.m : s.k;
  const std::size_t b_rows = bt ? s.n : s.k, b_cols = bt ? s.k : s.n;
  const std::size_t lda = a_cols + 3, ldb = b_cols + 1, ldc = s.n + 2;
  auto a = randomVector(a_rows * lda, 1 + s.m);
  auto b = randomVector(b_rows * ldb, 2 + s.n);
  auto c = randomVector(s.m * ldc, 3 + s.k);
  if (beta == 0.0f) std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
  auto c0 = c;
  gemm_fn(ta, tb, s.m, s.n, s.k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < s.m; ++i) {
    for (std::size_t j = 0; j < s.n; ++j) {
      double acc = 0;
      for (std::size_t p = 0; p < s.k; ++p) {
        double av = at ? a[p * lda + i] : a[i * lda + p];
        double bv = bt ? b[j * ldb + p] : b[p * ldb + j];
        acc += av * bv;
      }
      double want = alpha * acc + (beta == 0.0f ? 0.0 : beta * double(c0[i * ldc + j]));
      bad += !(std::abs(c[i * ldc + j] - want) <= 1e-4 * (1 + std::sqrt(double(s.k))));
    }
    // Padding columns of C are never written.
    for (std::size_t j = s.n; j < ldc; ++j) {
      bad += !(std::isnan(c[i * ldc + j]) == std::isnan(c0[i * ldc + j]));
    }
  }
  CHECK(bad == 0);
}

const Shape kShapes[] = {{1, 1, 1},      {3, 5, 7},    {17, 9, 300},
                         {64, 256, 129}, {130, 10, 2}, {2, 300, 1}};

}  // namespace

TEST_CASE("gemm: every transpose combination matches a naive loop, BLAS and fallback") {
  for (Shape s : kShapes) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        CAPTURE(s.m);
        CAPTURE(s.n);
        CAPTURE(s.k);
        CAPTURE(int(ta));
        CAPTURE(int(tb));
        checkAgainstNaive(gemm, ta, tb, s, 1.0f, 0.0f);
        checkAgainstNaive(gemm, ta, tb, s, -0.5f, 1.0f);
        checkAgainstNaive(gemmReference, ta, tb, s, 1.0f, 0.0f);
        checkAgainstNaive(gemmReference, ta, tb, s, 0.75f, -2.0f);
      }
    }
  }
}

TEST_CASE("gemm: k == 0 only scales C, beta == 0 clears it") {
  std::vector<float> c = {1, 2, 3, 4};
  gemm(Transpose::kNo, Transpose::kNo, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 2.0f, c.data(), 2);
  CHECK(c == std::vector<float>{2, 4, 6, 8});
  gemmReference(Transpose::kNo, Transpose::kNo, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f,
                c.data(), 2);
  CHECK(c == std::vector<float>{0, 0, 0, 0});
}

TEST_CASE("gemm: reports whether it was built with BLAS") {
#ifdef GROUPSGD_HAVE_OPENBLAS
  CHECK(haveBlas());
#else
  CHECK_FALSE(haveBlas());
#endif
}
