// TpAttention: nn::CausalSelfAttention with its heads split over the tp group (Megatron). Rank
// r runs heads [r*A/tp, (r+1)*A/tp): the qkv projection is column-parallel (its local output is
// this rank's heads of q, then of k, then of v), the causal attention core
// (nn/causal_attention.h) runs on those heads only, and the output projection is
// row-parallel, whose reduction ends the tp region.
//
// Contract
// - Owns no parameters: params first_param .. first_param + 3 of unit `unit` are qkv.weight
//   [3H/tp, H], qkv.bias [3H/tp] (tensor_parallel), proj.weight [H, H/tp] (tensor_parallel),
//   proj.bias [H] (replicated), read inside the caller's bracket.
// - x, y [local_rows, H] (tp_options.h: all batch * seq rows, or this rank's row block with
//   sequence parallelism); Backward takes the x Forward got and the activations it wrote, writes
//   dx (overwrites) and accumulates (+=) the parameter gradients.
// - Activations: TpAttentionActivations, owned by the caller (several may be in flight; a
//   recompute re-runs Forward into one before Backward). The collectives work in the caller's
//   TpScratch (tp_scratch.h), shared by all layers and micro-batches.
// - Blocks the calling thread in the tp collectives (two per pass); every tp rank calls in the
//   same order. Communicator errors are returned.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/unit_access.h"
#include "runtime/parallel/tensor/column_parallel_linear.h"
#include "runtime/parallel/tensor/row_parallel_linear.h"
#include "runtime/parallel/tensor/tp_options.h"

namespace zs::tp {

struct TpAttentionActivations {
  int64_t batch = 0;
  int64_t seq = 0;
  std::vector<float> qkv_out;  // [rows, 3 * H/tp]: this rank's q heads | k heads | v heads
  std::vector<float> probs;    // [batch, A/tp, seq, seq]
  std::vector<float> ctx;      // [rows, H/tp]
  // Backward scratch.
  std::vector<float> dctx;    // [rows, H/tp]
  std::vector<float> dqkv;    // [rows, 3 * H/tp]
  std::vector<float> dprobs;  // [seq, seq]
  int64_t bytes() const;
};

class TpAttention {
 public:
  // InvalidArgument naming heads and tp when tp does not divide the heads (and for hidden not a
  // multiple of heads).
  static StatusOr<TpAttention> Create(int unit, int first_param, int64_t hidden, int64_t heads,
                                      const TpOptions& tp);

  int num_params() const { return qkv_.num_params() + proj_.num_params(); }
  // nn::CausalSelfAttention's names, local shapes, layouts.
  std::vector<TpModuleParam> params(std::string_view prefix) const;
  int64_t local_heads() const { return heads_ / tp_.size; }

  Status Forward(UnitAccess& access, Communicator& tp, const float* x, int64_t batch, int64_t seq,
                 TpAttentionActivations& act, TpScratch& scratch, float* y) const;
  Status Backward(UnitAccess& access, Communicator& tp, const float* x, const float* dy,
                  TpAttentionActivations& act, TpScratch& scratch, float* dx) const;

 private:
  TpAttention(int64_t hidden, int64_t heads, const TpOptions& tp, ColumnParallelLinear qkv,
              RowParallelLinear proj);

  int64_t hidden_;
  int64_t heads_;
  TpOptions tp_;
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
};

}  // namespace zs::tp
