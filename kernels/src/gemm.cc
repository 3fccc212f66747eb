#include "groupsgd/kernels/gemm.h"

#ifdef GROUPSGD_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace groupsgd::kernels {

bool haveBlas() {
#ifdef GROUPSGD_HAVE_OPENBLAS
  return true;
#else
  return false;
#endif
}

void gemm(Transpose trans_a, Transpose trans_b, std::size_t m, std::size_t n, std::size_t k,
          float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta,
          float* c, std::size_t ldc) {
#ifdef GROUPSGD_HAVE_OPENBLAS
  // Degenerate shapes go to the fallback, which defines them (BLAS argument checks would
  // reject some leading dimensions of empty matrices).
  if (m != 0 && n != 0 && k != 0) {
    auto t = [](Transpose x) { return x == Transpose::kYes ? CblasTrans : CblasNoTrans; };
    cblas_sgemm(CblasRowMajor, t(trans_a), t(trans_b), static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
                static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
                static_cast<blasint>(ldc));
    return;
  }
#endif
  gemmReference(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace groupsgd::kernels
