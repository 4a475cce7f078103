// CausalSelfAttention: multi-head causal self-attention as in GPT-2:
//   qkv = x Wqkv^T + bqkv ([3H, H]; q, k, v side by side), per head a of A (D = H / A):
//   P = softmax_causal(q_a k_a^T / sqrt(D)), ctx_a = P v_a, y = ctx Wproj^T + bproj.
//
// Contract
// - Owns no parameters: params first_param .. first_param + 3 of unit `unit` are qkv.weight,
//   qkv.bias, proj.weight, proj.bias (read inside the caller's bracket).
// - Owns the activations its forward creates (qkv, the attention probabilities, ctx) until the
//   next Forward; Backward must follow a Forward and takes the same x (the caller keeps it). It
//   writes dx [B*T, H] (overwrites) and accumulates (+=) the parameter gradients.
// - Every matmul, including the per-head score and context products, goes through Sgemm; the
//   part between the two projections is CausalAttentionForward/Backward (causal_attention.h).
// - One thread at a time per object.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/model/unit_access.h"
#include "runtime/nn/linear.h"

namespace zs::nn {

class CausalSelfAttention {
 public:
  CausalSelfAttention(int unit, int first_param, int64_t hidden, int64_t heads);

  int num_params() const { return qkv_.num_params() + proj_.num_params(); }
  // "<prefix>qkv.{weight,bias}", "<prefix>proj.{weight,bias}"; proj.weight is a residual
  // projection (InitKind::kNormalResidual).
  std::vector<ModuleParam> params(std::string_view prefix) const;

  // x, y: [batch * seq, hidden].
  void Forward(UnitAccess& access, const float* x, int64_t batch, int64_t seq, float* y);
  void Backward(UnitAccess& access, const float* x, const float* dy, float* dx);

  // Bytes of the activations and scratch this object holds.
  int64_t activation_bytes() const;

 private:
  int64_t hidden_;
  int64_t heads_;
  Linear qkv_;
  Linear proj_;
  int64_t batch_ = 0;
  int64_t seq_ = 0;
  std::vector<float> qkv_out_;  // [B*T, 3H]
  std::vector<float> probs_;    // [B, A, T, T], zero above the diagonal
  std::vector<float> ctx_;      // [B*T, H]
  // Backward scratch.
  std::vector<float> dctx_;    // [B*T, H]
  std::vector<float> dqkv_;    // [B*T, 3H]
  std::vector<float> dprobs_;  // [T, T]
};

}  // namespace zs::nn
