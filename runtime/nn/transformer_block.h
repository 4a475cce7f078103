// TransformerBlock: a pre-LN GPT-2 block, x1 = x + attn(ln1(x)), y = x1 + mlp(ln2(x1)).
//
// Contract
// - Owns no parameters: its 12 parameters are params first_param .. first_param + 11 of unit
//   `unit`, in the order of params(): ln1, attn (qkv, proj), ln2, mlp (fc, proj). Read inside
//   the caller's bracket of that unit.
// - Owns the activations its forward creates until the next Forward; Backward must follow a
//   Forward, takes the same x (the caller keeps it), writes dx [B*T, H] (overwrites; dx may not
//   alias x or dy) and accumulates (+=) parameter gradients. One thread at a time per object.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/model/unit_access.h"
#include "runtime/nn/causal_self_attention.h"
#include "runtime/nn/layer_norm.h"
#include "runtime/nn/mlp.h"

namespace zs::nn {

class TransformerBlock {
 public:
  TransformerBlock(int unit, int first_param, int64_t hidden, int64_t heads);

  int num_params() const;
  // "<prefix>ln1.*", "<prefix>attn.*", "<prefix>ln2.*", "<prefix>mlp.*".
  std::vector<ModuleParam> params(std::string_view prefix) const;

  // x, y: [batch * seq, hidden]; y may not alias x.
  void Forward(UnitAccess& access, const float* x, int64_t batch, int64_t seq, float* y);
  void Backward(UnitAccess& access, const float* x, const float* dy, float* dx);

  int64_t activation_bytes() const;

 private:
  int64_t hidden_;
  LayerNorm ln1_;
  CausalSelfAttention attn_;
  LayerNorm ln2_;
  Mlp mlp_;
  int64_t rows_ = 0;
  std::vector<float> ln1_out_, ln1_mean_, ln1_rstd_;  // [rows, H], [rows], [rows]
  std::vector<float> x1_;                             // x + attn(ln1(x)) [rows, H]
  std::vector<float> ln2_out_, ln2_mean_, ln2_rstd_;
  std::vector<float> scratch_a_, scratch_b_;  // [rows, H]: branch outputs and their gradients
};

}  // namespace zs::nn
