#include "runtime/nn/causal_self_attention.h"

#include <string>

#include "runtime/base/check.h"
#include "runtime/nn/causal_attention.h"

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
  const int64_t n = batch * seq, h = hidden_, d = hidden_ / heads_;
  qkv_out_.resize(n * 3 * h);
  probs_.resize(batch * heads_ * seq * seq);
  ctx_.resize(n * h);
  qkv_.Forward(access, x, n, qkv_out_.data());
  CausalAttentionForward(qkv_out_.data(), batch, seq, heads_, d, probs_.data(), ctx_.data());
  proj_.Forward(access, ctx_.data(), n, y);
}

void CausalSelfAttention::Backward(UnitAccess& access, const float* x, const float* dy, float* dx) {
  ZS_CHECK(batch_ > 0, "CausalSelfAttention::Backward before Forward");
  const int64_t n = batch_ * seq_, h = hidden_, d = hidden_ / heads_;
  dctx_.resize(n * h);
  dqkv_.resize(n * 3 * h);
  dprobs_.resize(seq_ * seq_);
  proj_.Backward(access, ctx_.data(), dy, n, dctx_.data());
  CausalAttentionBackward(qkv_out_.data(), probs_.data(), dctx_.data(), batch_, seq_, heads_, d,
                          dprobs_.data(), dqkv_.data());
  qkv_.Backward(access, x, dqkv_.data(), n, dx);
}

int64_t CausalSelfAttention::activation_bytes() const {
  const size_t floats = qkv_out_.capacity() + probs_.capacity() + ctx_.capacity() +
                        dctx_.capacity() + dqkv_.capacity() + dprobs_.capacity();
  return static_cast<int64_t>(floats * sizeof(float));
}

}  // namespace zs::nn
