// RowParallelLinear: Megatron's row-parallel linear layer. The full layer is y = x W^T + b with
// W [out, in]; tp rank r holds the columns of W of its input features (W_r [out, in/tp],
// tensor_parallel) and computes the partial product x_r W_r^T from its input columns x_r
// [rows, in/tp] (the output of a column-parallel layer). The partial products leave the tp
// region through reduce-from-tp-region (forward all-reduce, backward identity) or, with
// sequence parallelism, reduce-scatter-to-sequence-region (forward reduce-scatter into row
// blocks, backward all-gather); the bias b [out] is replicated (tensor_parallel = false) and
// added once, after the reduction.
//
// Contract
// - Owns no parameters: params first_param (weight) and first_param + 1 (bias) of unit `unit`,
//   read through the UnitAccess inside the caller's bracket.
// - Shapes (rows = batch * seq): x [rows, in/tp], y [local_rows, out] (tp_options.h), dy
//   likewise, dx [rows, in/tp] (overwritten; may be null). Backward takes the x Forward got and
//   accumulates (+=) dW_r and db; db is the full bias gradient on every rank (summed over the
//   tp group with sequence parallelism, mappings.h AccumulateReplicatedGrads).
// - No activations of its own: the caller keeps x; the collectives and the bias gradient's
//   partial sum work in the caller's TpScratch (tp_scratch.h).
// - Blocks the calling thread in the tp collectives; every tp rank calls in the same order.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/unit_access.h"
#include "runtime/parallel/tensor/tp_options.h"
#include "runtime/parallel/tensor/tp_param_layout.h"
#include "runtime/parallel/tensor/tp_scratch.h"

namespace zs::tp {

class RowParallelLinear {
 public:
  // InvalidArgument naming in and tp when tp does not divide in.
  static StatusOr<RowParallelLinear> Create(int unit, int first_param, int64_t in, int64_t out,
                                            const TpOptions& tp, bool bias = true,
                                            nn::InitKind weight_init = nn::InitKind::kNormal);

  int num_params() const { return bias_ ? 2 : 1; }
  // nn::Linear's "<prefix>weight" (split columns) and "<prefix>bias" (replicated).
  std::vector<TpModuleParam> params(std::string_view prefix) const;
  int64_t in() const { return in_; }
  int64_t in_local() const { return in_ / tp_.size; }
  int64_t out() const { return out_; }

  Status Forward(UnitAccess& access, Communicator& tp, const float* x, int64_t rows,
                 TpScratch& scratch, float* y) const;
  Status Backward(UnitAccess& access, Communicator& tp, const float* x, const float* dy,
                  int64_t rows, TpScratch& scratch, float* dx) const;

 private:
  RowParallelLinear(int unit, int first_param, int64_t in, int64_t out, const TpOptions& tp,
                    bool bias, nn::InitKind weight_init);

  int unit_;
  int first_param_;
  int64_t in_;
  int64_t out_;
  TpOptions tp_;
  bool bias_;
  nn::InitKind weight_init_;
};

}  // namespace zs::tp
