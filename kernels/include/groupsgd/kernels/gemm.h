// Row-major single-precision GEMM: C = alpha*op(A)*op(B) + beta*C, op(A) M×K, op(B) K×N.
// Thread rule: reentrant. With OpenBLAS its own threading follows OPENBLAS_NUM_THREADS.
#pragma once

#include <cstddef>

namespace groupsgd::kernels {

enum class Transpose { kNo, kYes };

// With beta == 0, C is overwritten and its old contents (even NaN) are ignored.
// Uses cblas_sgemm when built with OpenBLAS, else gemmReference.
void gemm(Transpose trans_a, Transpose trans_b, std::size_t m, std::size_t n, std::size_t k,
          float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta,
          float* c, std::size_t ldc);

// The blocked C++ fallback; always built so it can be tested next to the BLAS path.
void gemmReference(Transpose trans_a, Transpose trans_b, std::size_t m, std::size_t n,
                   std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
                   std::size_t ldb, float beta, float* c, std::size_t ldc);

// True when gemm dispatches to a BLAS library.
bool haveBlas();

}  // namespace groupsgd::kernels
