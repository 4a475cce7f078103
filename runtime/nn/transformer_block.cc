#include "runtime/nn/transformer_block.h"

#include <string>

#include "runtime/base/check.h"

namespace zs::nn {

TransformerBlock::TransformerBlock(int unit, int first_param, int64_t hidden, int64_t heads)
    : hidden_(hidden),
      ln1_(unit, first_param, hidden),
      attn_(unit, first_param + 2, hidden, heads),
      ln2_(unit, first_param + 2 + attn_.num_params(), hidden),
      mlp_(unit, first_param + 4 + attn_.num_params(), hidden) {}

int TransformerBlock::num_params() const {
  return ln1_.num_params() + attn_.num_params() + ln2_.num_params() + mlp_.num_params();
}

std::vector<ModuleParam> TransformerBlock::params(std::string_view prefix) const {
  const std::string p(prefix);
  std::vector<ModuleParam> out;
  for (auto&& part : {ln1_.params(p + "ln1."), attn_.params(p + "attn."), ln2_.params(p + "ln2."),
                      mlp_.params(p + "mlp.")}) {
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

void TransformerBlock::Forward(UnitAccess& access, const float* x, int64_t batch, int64_t seq,
                               float* y) {
  const int64_t rows = batch * seq, n = rows * hidden_;
  rows_ = rows;
  ln1_out_.resize(n);
  ln1_mean_.resize(rows);
  ln1_rstd_.resize(rows);
  x1_.resize(n);
  ln2_out_.resize(n);
  ln2_mean_.resize(rows);
  ln2_rstd_.resize(rows);
  scratch_a_.resize(n);
  ln1_.Forward(access, x, rows, ln1_out_.data(), ln1_mean_.data(), ln1_rstd_.data());
  attn_.Forward(access, ln1_out_.data(), batch, seq, scratch_a_.data());
  for (int64_t i = 0; i < n; ++i) x1_[i] = x[i] + scratch_a_[i];
  ln2_.Forward(access, x1_.data(), rows, ln2_out_.data(), ln2_mean_.data(), ln2_rstd_.data());
  mlp_.Forward(access, ln2_out_.data(), rows, scratch_a_.data());
  for (int64_t i = 0; i < n; ++i) y[i] = x1_[i] + scratch_a_[i];
}

void TransformerBlock::Backward(UnitAccess& access, const float* x, const float* dy, float* dx) {
  ZS_CHECK(rows_ > 0, "TransformerBlock::Backward before Forward");
  const int64_t n = rows_ * hidden_;
  scratch_b_.resize(n);
  float* a = scratch_a_.data();
  float* b = scratch_b_.data();
  // y = x1 + mlp(ln2(x1)): dx1 = dy + ln2'(mlp'(dy)), kept in dx.
  mlp_.Backward(access, ln2_out_.data(), dy, a);
  ln2_.Backward(access, x1_.data(), ln2_mean_.data(), ln2_rstd_.data(), a, rows_, b);
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] + b[i];
  // x1 = x + attn(ln1(x)): dx = dx1 + ln1'(attn'(dx1)).
  attn_.Backward(access, ln1_out_.data(), dx, a);
  ln1_.Backward(access, x, ln1_mean_.data(), ln1_rstd_.data(), a, rows_, b);
  for (int64_t i = 0; i < n; ++i) dx[i] += b[i];
}

int64_t TransformerBlock::activation_bytes() const {
  size_t floats = 0;
  for (const std::vector<float>* v : {&ln1_out_, &ln1_mean_, &ln1_rstd_, &x1_, &ln2_out_,
                                      &ln2_mean_, &ln2_rstd_, &scratch_a_, &scratch_b_}) {
    floats += v->capacity();
  }
  return static_cast<int64_t>(floats * sizeof(float)) + attn_.activation_bytes() +
         mlp_.activation_bytes();
}

}  // namespace zs::nn
