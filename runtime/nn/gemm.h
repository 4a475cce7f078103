// Sgemm: row-major single-precision matrix products for runtime/nn, through OpenBLAS.
//
// Contract
// - C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C, all row-major; op(X) is X or X^T
//   (trans_a / trans_b); lda, ldb, ldc are the row strides of A, B, C as stored.
// - Blocks the calling thread; no allocation. Safe to call from several threads at once.
// - BLAS runs single-threaded: the first call sets openblas_set_num_threads(1) once per process
//   (ranks run as threads on a few cores; BLAS threads of their own would oversubscribe them).
// - cblas.h stays private to gemm.cc so that users of runtime/nn need no BLAS headers.
#pragma once

#include <cstdint>

namespace zs::nn {

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace zs::nn
