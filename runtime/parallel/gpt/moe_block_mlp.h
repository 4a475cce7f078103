// MoeBlockMlp: a mixture of experts (MoeMlp, runtime/parallel/expert) as a tensor-parallel
// transformer block's MLP branch (tp::TpBlockMlp): what TpGpt's blocks hold with experts. The
// composition of the two parallelisms lives here, so neither the tp layers nor the experts know
// of the other.
//
// Contract
// - Parameters: none in the block's unit; the MoeMlp's (the router, then this ep rank's experts,
//   names "moe.*") are params 0.. of unit `moe_unit`, whose bracket the caller holds beside the
//   block's. moe() gives them (moe().params()).
// - The block adds nothing to the loss itself: MoeMlp's Backward seeds its load-balancing loss;
//   after it, the router's gradient (each ep rank's tokens' part) is summed over the ep group,
//   so every ep rank holds the same router gradient. Grad() may already hold earlier
//   micro-batches' sums (a pipeline engine's reduce_per_step accumulation): the part is summed
//   in a zeroed buffer of the TpScratch and then added once.
// - [Note: experts over tp] With tp > 1 the experts are replicated over the tp group (their
//   parameters are not tensor-parallel), and every tp rank runs the MoE on all rows of the
//   micro-batch, so each computes the same outputs and the complete, identical gradients: tp
//   times the expert compute and all-to-all traffic, no extra collective over tp. Under
//   sequence parallelism the rows are first all-gathered over tp (forward: the input;
//   backward: the input again, as Megatron's column-parallel layers do, and the output
//   gradient), in the TpScratch, and each rank keeps its own block of the result.
// - Collective over tp (under sequence parallelism) and over ep, in the same order on every
//   rank; blocks the calling thread. Communicator errors are returned with context.
// - `ep` (borrowed; null = one rank holding every expert) must outlive the object.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/unit_access.h"
#include "runtime/parallel/expert/moe_config.h"
#include "runtime/parallel/expert/moe_mlp.h"
#include "runtime/parallel/tensor/tp_block_mlp.h"
#include "runtime/parallel/tensor/tp_options.h"

namespace zs::parallel {

struct MoeBlockMlpActivations final : tp::TpBlockMlpActivations {
  MoeActivations moe;
  int64_t bytes() const override { return moe.bytes(); }
};

class MoeBlockMlp final : public tp::TpBlockMlp {
 public:
  // MoeMlp::Create's errors (ValidateMoeConfig).
  static StatusOr<std::shared_ptr<const MoeBlockMlp>> Create(int moe_unit, const MoeConfig& config,
                                                             const tp::TpOptions& tp,
                                                             Communicator* ep);

  const MoeMlp& moe() const { return moe_; }

  int num_params() const override { return 0; }
  std::vector<tp::TpModuleParam> params(std::string_view) const override { return {}; }
  std::unique_ptr<tp::TpBlockMlpActivations> NewActivations() const override {
    return std::make_unique<MoeBlockMlpActivations>();
  }
  Status Forward(UnitAccess& access, Communicator& tp, const float* x, int64_t rows,
                 tp::TpBlockMlpActivations& act, tp::TpScratch& scratch, float* y) const override;
  Status Backward(UnitAccess& access, Communicator& tp, const float* x, const float* dy,
                  tp::TpBlockMlpActivations& act, tp::TpScratch& scratch, float* dx) const override;

 private:
  MoeBlockMlp(MoeMlp moe, int moe_unit, const tp::TpOptions& tp, Communicator* ep);
  // Under sequence parallelism with tp > 1: the MoE runs on all rows.
  bool GathersRows() const { return tp_.sequence_parallel && tp_.size > 1; }
  // The MoeMlp's backward from input x and output gradient dy (all its rows), with the
  // router's gradient summed over ep.
  Status MoeBackward(UnitAccess& access, const float* x, const float* dy, MoeActivations& act,
                     tp::TpScratch& scratch, float* dx) const;

  MoeMlp moe_;
  int moe_unit_;
  tp::TpOptions tp_;
  Communicator* ep_;
};

}  // namespace zs::parallel
