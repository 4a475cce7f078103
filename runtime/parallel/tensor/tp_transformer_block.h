// TpTransformerBlock: nn::TransformerBlock (pre-LN GPT-2: x1 = x + attn(ln1(x)),
// y = x1 + mlp(ln2(x1))) with attention heads and the MLP split over the tp group. The
// LayerNorms and residual adds run outside the tp regions on the rows this rank holds: all
// rows, or its row block with sequence parallelism (tp_options.h).
//
// Contract
// - Owns no parameters: params first_param .. first_param + 7 of unit `unit` and then the
//   MLP's, in nn's order and names (ln1, attn.qkv, attn.proj, ln2, then TpMlp's mlp.fc,
//   mlp.proj), local shapes; read inside the caller's bracket.
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
// - The MLP branch is a TpBlockMlp (tp_block_mlp.h): TpMlp (Create), or any other the caller
//   gives (CreateWithMlp; runtime/parallel/gpt/moe_block_mlp.h puts experts there). One
//   virtual call per pass.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/unit_access.h"
#include "runtime/parallel/tensor/tp_attention.h"
#include "runtime/parallel/tensor/tp_block_mlp.h"
#include "runtime/parallel/tensor/tp_layer_norm.h"
#include "runtime/parallel/tensor/tp_options.h"

namespace zs::tp {

struct TpBlockActivations {
  int64_t batch = 0;
  int64_t seq = 0;
  std::vector<float> ln1_out, ln1_mean, ln1_rstd;  // [local_rows, H], [local_rows] x2
  std::vector<float> x1;                           // x + attn(ln1(x)) [local_rows, H]
  std::vector<float> ln2_out, ln2_mean, ln2_rstd;
  TpAttentionActivations attn;
  std::unique_ptr<TpBlockMlpActivations> mlp;  // the block's TpBlockMlp's (its first Forward)
  // Scratch: branch outputs and their gradients [local_rows, H].
  std::vector<float> scratch_a, scratch_b;
  int64_t bytes() const;
};

class TpTransformerBlock {
 public:
  // InvalidArgument naming the size and tp for heads (or the MLP width) not divisible by tp.
  static StatusOr<TpTransformerBlock> Create(int unit, int first_param, int64_t hidden,
                                             int64_t heads, const TpOptions& tp);
  // The MLP branch `mlp` (not null), created over the params that follow ln2 in `unit`
  // (first_param + 8 on), if it has any there.
  static StatusOr<TpTransformerBlock> CreateWithMlp(int unit, int first_param, int64_t hidden,
                                                    int64_t heads, const TpOptions& tp,
                                                    std::shared_ptr<const TpBlockMlp> mlp);
  const TpBlockMlp& mlp() const { return *mlp_; }

  int num_params() const;
  std::vector<TpModuleParam> params(std::string_view prefix) const;

  Status Forward(UnitAccess& access, Communicator& tp, const float* x, int64_t batch, int64_t seq,
                 TpBlockActivations& act, TpScratch& scratch, float* y) const;
  Status Backward(UnitAccess& access, Communicator& tp, const float* x, const float* dy,
                  TpBlockActivations& act, TpScratch& scratch, float* dx) const;

 private:
  TpTransformerBlock(int64_t hidden, const TpOptions& tp, TpLayerNorm ln1, TpAttention attn,
                     TpLayerNorm ln2, std::shared_ptr<const TpBlockMlp> mlp);

  int64_t hidden_;
  TpOptions tp_;
  TpLayerNorm ln1_;
  TpAttention attn_;
  TpLayerNorm ln2_;
  std::shared_ptr<const TpBlockMlp> mlp_;
};

}  // namespace zs::tp
