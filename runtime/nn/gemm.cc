#include "runtime/nn/gemm.h"

#include <cblas.h>

#include <mutex>

#include "runtime/base/check.h"

namespace zs::nn {

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  static std::once_flag single_thread;
  std::call_once(single_thread, [] { openblas_set_num_threads(1); });
  ZS_DCHECK(m >= 0 && n >= 0 && k >= 0, "Sgemm: m={} n={} k={}", m, n, k);
  if (m == 0 || n == 0) return;
  if (k == 0) {  // BLAS rejects lda < 1; the product is empty, C = beta * C.
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

}  // namespace zs::nn
