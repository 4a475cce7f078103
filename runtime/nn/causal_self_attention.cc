#include "runtime/nn/causal_self_attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/base/check.h"
#include "runtime/nn/gemm.h"

namespace zs::nn {

CausalSelfAttention::CausalSelfAttention(int unit, int first_param, int64_t hidden, int64_t heads)
    : hidden_(hidden),
      heads_(heads),
      qkv_(unit, first_param, hidden, 3 * hidden),
      proj_(unit, first_param + 2, hidden, hidden, /*bias=*/true, InitKind::kNormalResidual) {
  ZS_CHECK(heads > 0 && hidden % heads == 0, "hidden {} is not a multiple of heads {}", hidden,
           heads);
}

std::vector<ModuleParam> CausalSelfAttention::params(std::string_view prefix) const {
  std::vector<ModuleParam> out = qkv_.params(std::string(prefix) + "qkv.");
  for (ModuleParam& p : proj_.params(std::string(prefix) + "proj.")) out.push_back(std::move(p));
  return out;
}

void CausalSelfAttention::Forward(UnitAccess& access, const float* x, int64_t batch, int64_t seq,
                                  float* y) {
  batch_ = batch;
  seq_ = seq;
  const int64_t n = batch * seq, h = hidden_, h3 = 3 * hidden_, d = hidden_ / heads_, t = seq;
  qkv_out_.resize(n * h3);
  probs_.resize(batch * heads_ * t * t);
  ctx_.resize(n * h);
  qkv_.Forward(access, x, n, qkv_out_.data());
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t a = 0; a < heads_; ++a) {
      const float* q = qkv_out_.data() + b * t * h3 + a * d;
      const float* k = q + h;
      const float* v = q + 2 * h;
      float* p = probs_.data() + (b * heads_ + a) * t * t;
      Sgemm(false, true, t, t, d, scale, q, h3, k, h3, 0.0f, p, t);
      for (int64_t i = 0; i < t; ++i) {  // causal softmax of row i over j <= i
        float* row = p + i * t;
        float max = row[0];
        for (int64_t j = 1; j <= i; ++j) max = std::max(max, row[j]);
        float sum = 0.0f;
        for (int64_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - max);
          sum += row[j];
        }
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
        for (int64_t j = i + 1; j < t; ++j) row[j] = 0.0f;
      }
      Sgemm(false, false, t, d, t, 1.0f, p, t, v, h3, 0.0f, ctx_.data() + b * t * h + a * d, h);
    }
  }
  proj_.Forward(access, ctx_.data(), n, y);
}

void CausalSelfAttention::Backward(UnitAccess& access, const float* x, const float* dy, float* dx) {
  ZS_CHECK(batch_ > 0, "CausalSelfAttention::Backward before Forward");
  const int64_t n = batch_ * seq_, h = hidden_, h3 = 3 * hidden_, d = hidden_ / heads_, t = seq_;
  dctx_.resize(n * h);
  dqkv_.resize(n * h3);
  dprobs_.resize(t * t);
  proj_.Backward(access, ctx_.data(), dy, n, dctx_.data());
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t a = 0; a < heads_; ++a) {
      const int64_t off = b * t * h3 + a * d;
      const float* q = qkv_out_.data() + off;
      const float* k = q + h;
      const float* v = q + 2 * h;
      float* dq = dqkv_.data() + off;
      float* dk = dq + h;
      float* dv = dq + 2 * h;
      const float* p = probs_.data() + (b * heads_ + a) * t * t;
      const float* dc = dctx_.data() + b * t * h + a * d;
      float* dp = dprobs_.data();
      Sgemm(false, true, t, t, d, 1.0f, dc, h, v, h3, 0.0f, dp, t);  // dP = dctx v^T
      Sgemm(true, false, t, d, t, 1.0f, p, t, dc, h, 0.0f, dv, h3);  // dv = P^T dctx
      for (int64_t i = 0; i < t; ++i) {  // dS = P * (dP - sum_j P dP), zero above the diagonal
        const float* pr = p + i * t;
        float* dr = dp + i * t;
        float dot = 0.0f;
        for (int64_t j = 0; j <= i; ++j) dot += pr[j] * dr[j];
        for (int64_t j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - dot);
        for (int64_t j = i + 1; j < t; ++j) dr[j] = 0.0f;
      }
      Sgemm(false, false, t, d, t, scale, dp, t, k, h3, 0.0f, dq, h3);  // dq = dS k / sqrt(D)
      Sgemm(true, false, t, d, t, scale, dp, t, q, h3, 0.0f, dk, h3);   // dk = dS^T q / sqrt(D)
    }
  }
  qkv_.Backward(access, x, dqkv_.data(), n, dx);
}

int64_t CausalSelfAttention::activation_bytes() const {
  const size_t floats = qkv_out_.capacity() + probs_.capacity() + ctx_.capacity() +
                        dctx_.capacity() + dqkv_.capacity() + dprobs_.capacity();
  return static_cast<int64_t>(floats * sizeof(float));
}

}  // namespace zs::nn
