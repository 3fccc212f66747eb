// Blocked C++ GEMM: packs a K×N panel of op(B) into a contiguous buffer, then adds
// alpha*A(i,k) times each packed row into row i of C; the inner loop is a unit-stride axpy
// over a cache-resident C row, which the compiler vectorises.
#include <algorithm>
#include <vector>

#include "groupsgd/kernels/gemm.h"

namespace groupsgd::kernels {
namespace {

constexpr std::size_t kBlockN = 256;  // C row segment: 1 KiB, stays in L1
constexpr std::size_t kBlockK = 128;  // packed panel: 128 KiB, stays in L2

void axpyRow(float a, const float* __restrict x, float* __restrict y, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) y[j] += a * x[j];
}

}  // namespace

void gemmReference(Transpose trans_a, Transpose trans_b, std::size_t m, std::size_t n,
                   std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
                   std::size_t ldb, float beta, float* c, std::size_t ldc) {
  for (std::size_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      std::fill(row, row + n, 0.0f);  // BLAS rule: ignore C's old contents
    } else if (beta != 1.0f) {
      for (std::size_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
  if (m == 0 || n == 0 || k == 0 || alpha == 0.0f) return;

  const bool ta = trans_a == Transpose::kYes;
  const bool tb = trans_b == Transpose::kYes;
  std::vector<float> panel(kBlockK * kBlockN);
  for (std::size_t jc = 0; jc < n; jc += kBlockN) {
    const std::size_t nb = std::min(kBlockN, n - jc);
    for (std::size_t pc = 0; pc < k; pc += kBlockK) {
      const std::size_t kb = std::min(kBlockK, k - pc);
      for (std::size_t p = 0; p < kb; ++p) {
        float* dst = panel.data() + p * nb;
        if (tb) {
          for (std::size_t j = 0; j < nb; ++j) dst[j] = b[(jc + j) * ldb + pc + p];
        } else {
          std::copy_n(b + (pc + p) * ldb + jc, nb, dst);
        }
      }
      for (std::size_t i = 0; i < m; ++i) {
        float* crow = c + i * ldc + jc;
        for (std::size_t p = 0; p < kb; ++p) {
          float aip = ta ? a[(pc + p) * lda + i] : a[i * lda + pc + p];
          axpyRow(alpha * aip, panel.data() + p * nb, crow, nb);
        }
      }
    }
  }
}

}  // namespace groupsgd::kernels
