// TpMlp: nn::Mlp split over the tp group (Megatron): fc (H -> 4H) column-parallel, GELU on this
// rank's 4H/tp columns, proj (4H -> H) row-parallel, whose reduction ends the tp region.
//
// Contract
// - Owns no parameters: params first_param .. first_param + 3 of unit `unit` are fc.weight
//   [4H/tp, H], fc.bias [4H/tp], proj.weight [H, 4H/tp] (tensor_parallel) and proj.bias [H]
//   (replicated), read inside the caller's bracket.
// - x, y [local_rows, H] (tp_options.h); Backward takes the x Forward got and the activations
//   it wrote, writes dx (overwrites) and accumulates (+=) the parameter gradients.
// - Activations: TpMlpActivations, owned by the caller; the collectives work in the caller's
//   TpScratch (tp_scratch.h).
// - The dense TpBlockMlp (tp_block_mlp.h): a transformer block's MLP unless its caller gives
//   another.
// - Blocks the calling thread in the tp collectives (two per pass); every tp rank calls in the
//   same order. Communicator errors are returned.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/unit_access.h"
#include "runtime/parallel/tensor/column_parallel_linear.h"
#include "runtime/parallel/tensor/row_parallel_linear.h"
#include "runtime/parallel/tensor/tp_block_mlp.h"
#include "runtime/parallel/tensor/tp_options.h"

namespace zs::tp {

struct TpMlpActivations final : TpBlockMlpActivations {
  int64_t rows = 0;
  std::vector<float> pre;   // fc output [rows, 4H/tp]
  std::vector<float> act;   // gelu(pre) [rows, 4H/tp]
  std::vector<float> dact;  // backward scratch [rows, 4H/tp]
  int64_t bytes() const override;
};

class TpMlp final : public TpBlockMlp {
 public:
  // InvalidArgument naming the MLP width 4H and tp when tp does not divide it.
  static StatusOr<TpMlp> Create(int unit, int first_param, int64_t hidden, const TpOptions& tp);

  int num_params() const override { return fc_.num_params() + proj_.num_params(); }
  std::vector<TpModuleParam> params(std::string_view prefix) const override;
  std::unique_ptr<TpBlockMlpActivations> NewActivations() const override {
    return std::make_unique<TpMlpActivations>();
  }

  // rows = batch * seq (the full row count); `act` a TpMlpActivations.
  Status Forward(UnitAccess& access, Communicator& tp, const float* x, int64_t rows,
                 TpBlockMlpActivations& act, TpScratch& scratch, float* y) const override;
  Status Backward(UnitAccess& access, Communicator& tp, const float* x, const float* dy,
                  TpBlockMlpActivations& act, TpScratch& scratch, float* dx) const override;

 private:
  TpMlp(ColumnParallelLinear fc, RowParallelLinear proj);

  ColumnParallelLinear fc_;
  RowParallelLinear proj_;
};

}  // namespace zs::tp
