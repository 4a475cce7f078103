// ColumnParallelLinear: Megatron's column-parallel linear layer. The full layer is
// y = x W^T + b with W [out, in], b [out]; tp rank r holds the rows of W and b of its output
// columns (W_r [out/tp, in], b_r [out/tp], both tensor_parallel) and computes y_r = x W_r^T + b_r,
// its columns of y. With blocks > 1 the output is that many equal blocks, each split over tp
// (qkv: rank r's heads of q, then of k, then of v; tp_param_layout.h).
//
// Communication (mappings.h): the input enters the tp region through copy-to-tp-region
// (forward identity, backward all-reduce of dx) or, with sequence parallelism, through
// gather-from-sequence-region (forward all-gather of the row blocks, backward reduce-scatter).
//
// Contract
// - Owns no parameters: params first_param (weight) and first_param + 1 (bias) of unit `unit`,
//   read through the UnitAccess inside the caller's bracket (forward for Forward, backward for
//   Backward). ForwardWithWeights / BackwardWithWeights do the same with weights the caller
//   passes (the LM head's tied, vocabulary-parallel wte).
// - Shapes (rows = batch * seq, the full row count): x [local_rows, in] (tp_options.h: all rows,
//   or this rank's row block with sequence parallelism), y [rows, out/tp], dy likewise, dx
//   [local_rows, in] (overwritten). Backward takes the x Forward got (the caller keeps it; with
//   sequence parallelism it is all-gathered again, as Megatron does, rather than kept gathered)
//   and accumulates (+=) dW_r and db_r. dx may be null on every rank (no input gradient, no
//   communication).
// - No activations of its own: the caller keeps x; the collectives work in the caller's
//   TpScratch (tp_scratch.h), whose contents are dead between calls.
// - Blocks the calling thread in the tp collectives; every tp rank calls in the same order.
//   Errors from the communicator are returned (the brackets stay open).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/unit_access.h"
#include "runtime/parallel/tensor/tp_options.h"
#include "runtime/parallel/tensor/tp_param_layout.h"
#include "runtime/parallel/tensor/tp_scratch.h"

namespace zs::tp {

class ColumnParallelLinear {
 public:
  // InvalidArgument naming out (or out / blocks) and tp when they do not divide.
  static StatusOr<ColumnParallelLinear> Create(int unit, int first_param, int64_t in, int64_t out,
                                               const TpOptions& tp, bool bias = true,
                                               nn::InitKind weight_init = nn::InitKind::kNormal,
                                               int blocks = 1);

  int num_params() const { return bias_ ? 2 : 1; }
  // nn::Linear's "<prefix>weight" and "<prefix>bias" with local shapes and layouts.
  std::vector<TpModuleParam> params(std::string_view prefix) const;
  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  int64_t out_local() const { return out_ / tp_.size; }

  Status Forward(UnitAccess& access, Communicator& tp, const float* x, int64_t rows,
                 TpScratch& scratch, float* y) const;
  Status Backward(UnitAccess& access, Communicator& tp, const float* x, const float* dy,
                  int64_t rows, TpScratch& scratch, float* dx) const;

  // The same math with explicit local weights: w [out_local, in], b [out_local] or empty;
  // dw, db accumulate (+=), db empty without a bias.
  static Status ForwardWithWeights(Communicator& tp, bool sequence_parallel,
                                   std::span<const float> w, std::span<const float> b, int64_t in,
                                   const float* x, int64_t rows, TpScratch& scratch, float* y);
  static Status BackwardWithWeights(Communicator& tp, bool sequence_parallel,
                                    std::span<const float> w, std::span<float> dw,
                                    std::span<float> db, int64_t in, const float* x,
                                    const float* dy, int64_t rows, TpScratch& scratch, float* dx);

 private:
  ColumnParallelLinear(int unit, int first_param, int64_t in, int64_t out, const TpOptions& tp,
                       bool bias, nn::InitKind weight_init, int blocks);

  int unit_;
  int first_param_;
  int64_t in_;
  int64_t out_;
  TpOptions tp_;
  bool bias_;
  nn::InitKind weight_init_;
  int blocks_;
};

}  // namespace zs::tp
