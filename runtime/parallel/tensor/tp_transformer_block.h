// TpTransformerBlock: nn::TransformerBlock (pre-LN GPT-2: x1 = x + attn(ln1(x)),
// y = x1 + mlp(ln2(x1))) with attention heads and the MLP split over the tp group. The
// LayerNorms and residual adds run outside the tp regions on the rows this rank holds: all
// rows, or its row block with sequence parallelism (tp_options.h).
//
// Contract
// - Owns no parameters: params first_param .. first_param + 11 of unit `unit`, in nn's order
//   and names (ln1, attn.qkv, attn.proj, ln2, mlp.fc, mlp.proj), local shapes; read inside the
//   caller's bracket.
// - x, y, dy, dx [local_rows, H]. Forward writes y (may not alias x) and fills the caller's
//   TpBlockActivations; Backward takes the same x and those activations, writes dx
//   (overwrites; may not alias x or dy) and accumulates (+=) the gradients. Replicated
//   parameters get the full gradient on every tp rank (summed over tp under sequence
//   parallelism).
// - Activations live only in TpBlockActivations (caller-owned), so a pipeline may keep one per
//   micro-batch in flight, or keep only x and re-run Forward into scratch activations before
//   Backward (recompute): Forward is deterministic. The collectives work in the caller's
//   TpScratch (tp_scratch.h), shared by every layer and micro-batch of the rank.
// - Blocks the calling thread in the tp collectives; every tp rank calls in the same order.
// - Experts (CreateMoe): the MLP is a MoeMlp (runtime/parallel/expert/moe_mlp.h) whose
//   parameters are unit `moe_unit`'s (router, then this ep rank's experts): the caller holds
//   both units' brackets. The block adds nothing to the loss itself: MoeMlp's Backward seeds
//   its load-balancing loss; after it, the router's gradient (each ep rank's tokens' part) is
//   summed over the ep group, so every ep rank holds the same router gradient.
// - Experts with tp > 1 ([Note: experts over tp]): the experts are replicated over the tp group
//   (their parameters are not tensor-parallel), and every tp rank runs the MoE on all rows of
//   the micro-batch, so each computes the same outputs and the complete, identical gradients:
//   tp times the expert compute and all-to-all traffic, no extra collective over tp. Under
//   sequence parallelism the rows are first all-gathered over tp (forward: the input; backward:
//   the input again, as Megatron's column-parallel layers do, and the output gradient), in the
//   TpScratch, and each rank keeps its own block of the result.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/unit_access.h"
#include "runtime/parallel/tensor/tp_attention.h"
#include "runtime/parallel/tensor/tp_layer_norm.h"
#include "runtime/parallel/expert/moe_mlp.h"
#include "runtime/parallel/tensor/tp_mlp.h"
#include "runtime/parallel/tensor/tp_options.h"

namespace zs::tp {

struct TpBlockActivations {
  int64_t batch = 0;
  int64_t seq = 0;
  std::vector<float> ln1_out, ln1_mean, ln1_rstd;  // [local_rows, H], [local_rows] x2
  std::vector<float> x1;                           // x + attn(ln1(x)) [local_rows, H]
  std::vector<float> ln2_out, ln2_mean, ln2_rstd;
  TpAttentionActivations attn;
  TpMlpActivations mlp;
  MoeActivations moe;  // experts only
  // Scratch: branch outputs and their gradients [local_rows, H].
  std::vector<float> scratch_a, scratch_b;
  int64_t bytes() const;
};

class TpTransformerBlock {
 public:
  // InvalidArgument naming the size and tp for heads (or the MLP width) not divisible by tp.
  static StatusOr<TpTransformerBlock> Create(int unit, int first_param, int64_t hidden,
                                             int64_t heads, const TpOptions& tp);
  // The MLP as experts: ln1, attn, ln2 are params first_param.. of `unit`; the MoeMlp's are
  // params 0.. of `moe_unit`. `ep` (borrowed; null = one rank with every expert).
  static StatusOr<TpTransformerBlock> CreateMoe(int unit, int first_param, int moe_unit,
                                                int64_t hidden, int64_t heads,
                                                const TpOptions& tp, const MoeConfig& moe,
                                                Communicator* ep);
  bool has_experts() const { return moe_.has_value(); }
  // The MoeMlp's parameters (experts only), names prefixed "moe.".
  std::vector<nn::ModuleParam> moe_params() const;
  const MoeMlp* moe() const { return moe_ ? &*moe_ : nullptr; }

  int num_params() const;
  std::vector<TpModuleParam> params(std::string_view prefix) const;

  Status Forward(UnitAccess& access, Communicator& tp, const float* x, int64_t batch, int64_t seq,
                 TpBlockActivations& act, TpScratch& scratch, float* y) const;
  Status Backward(UnitAccess& access, Communicator& tp, const float* x, const float* dy,
                  TpBlockActivations& act, TpScratch& scratch, float* dx) const;

 private:
  TpTransformerBlock(int64_t hidden, const TpOptions& tp, TpLayerNorm ln1, TpAttention attn,
                     TpLayerNorm ln2, std::optional<TpMlp> mlp, std::optional<MoeMlp> moe,
                     Communicator* ep, int moe_unit);
  Status MlpForward(UnitAccess& access, Communicator& tp, TpBlockActivations& act,
                    TpScratch& scratch, int64_t rows, float* y) const;
  Status MlpBackward(UnitAccess& access, Communicator& tp, const float* dy,
                     TpBlockActivations& act, TpScratch& scratch, float* dx) const;
  // The MoeMlp's backward from input x and output gradient dy, with the router's gradient
  // summed over ep.
  Status MoeBackward(UnitAccess& access, const float* x, const float* dy, TpBlockActivations& act,
                     TpScratch& scratch, float* dx) const;
  // Experts under sequence parallelism with tp > 1: the MoE runs on all rows.
  bool GathersRows() const;

  int64_t hidden_;
  TpOptions tp_;
  TpLayerNorm ln1_;
  TpAttention attn_;
  TpLayerNorm ln2_;
  std::optional<TpMlp> mlp_;  // exactly one of mlp_ and moe_
  std::optional<MoeMlp> moe_;
  Communicator* ep_ = nullptr;
  int moe_unit_ = -1;
};

}  // namespace zs::tp
