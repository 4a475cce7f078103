#include "runtime/nn/causal_attention.h"

#include <algorithm>
#include <cmath>

#include "runtime/nn/gemm.h"
#include "runtime/nn/softmax_kernels.h"

namespace zs::nn {

void CausalAttentionForward(const float* qkv, int64_t batch, int64_t seq, int64_t heads,
                            int64_t head_dim, float* probs, float* ctx) {
  const int64_t d = head_dim, w = heads * head_dim, w3 = 3 * w, t = seq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t a = 0; a < heads; ++a) {
      const float* q = qkv + b * t * w3 + a * d;
      const float* k = q + w;
      const float* v = q + 2 * w;
      float* p = probs + (b * heads + a) * t * t;
      Sgemm(false, true, t, t, d, scale, q, w3, k, w3, 0.0f, p, t);
      for (int64_t i = 0; i < t; ++i) {  // causal softmax of row i over j <= i
        float* row = p + i * t;
        const int64_t n = i + 1;
        const double sum = ExpShifted(row, n, RowMax(row, n), row);
        ScaleRow(row, n, static_cast<float>(1.0 / sum));
        std::fill(row + n, row + t, 0.0f);
      }
      Sgemm(false, false, t, d, t, 1.0f, p, t, v, w3, 0.0f, ctx + b * t * w + a * d, w);
    }
  }
}

void CausalAttentionBackward(const float* qkv, const float* probs, const float* dctx, int64_t batch,
                             int64_t seq, int64_t heads, int64_t head_dim, float* dprobs,
                             float* dqkv) {
  const int64_t d = head_dim, w = heads * head_dim, w3 = 3 * w, t = seq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t a = 0; a < heads; ++a) {
      const int64_t off = b * t * w3 + a * d;
      const float* q = qkv + off;
      const float* k = q + w;
      const float* v = q + 2 * w;
      float* dq = dqkv + off;
      float* dk = dq + w;
      float* dv = dq + 2 * w;
      const float* p = probs + (b * heads + a) * t * t;
      const float* dc = dctx + b * t * w + a * d;
      float* dp = dprobs;
      Sgemm(false, true, t, t, d, 1.0f, dc, w, v, w3, 0.0f, dp, t);  // dP = dctx v^T
      Sgemm(true, false, t, d, t, 1.0f, p, t, dc, w, 0.0f, dv, w3);  // dv = P^T dctx
      for (int64_t i = 0; i < t; ++i) {  // dS = P * (dP - sum_j P dP), zero above the diagonal
        const float* pr = p + i * t;
        float* dr = dp + i * t;
        float dot = 0.0f;
        for (int64_t j = 0; j <= i; ++j) dot += pr[j] * dr[j];
        for (int64_t j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - dot);
        for (int64_t j = i + 1; j < t; ++j) dr[j] = 0.0f;
      }
      Sgemm(false, false, t, d, t, scale, dp, t, k, w3, 0.0f, dq, w3);  // dq = dS k / sqrt(D)
      Sgemm(true, false, t, d, t, scale, dp, t, q, w3, 0.0f, dk, w3);   // dk = dS^T q / sqrt(D)
    }
  }
}

}  // namespace zs::nn
