// TpLayerNorm: nn::LayerNorm in a tensor-parallel model. Its gain and bias are replicated over
// the tp group (tensor_parallel = false) and it runs outside the tp regions, on the rows this
// rank holds (tp_options.h): all rows, or its row block with sequence parallelism. Then its
// gradients are partial sums over this rank's rows, and Backward sums them over the tp group
// before adding them (one all-reduce of 2 * dim floats; mappings.h AccumulateReplicatedGrads),
// so every tp rank accumulates the same full gradient.
//
// Contract
// - Owns no parameters: params first_param (gain) and first_param + 1 (bias) of unit `unit`,
//   read inside the caller's bracket. x, y [local_rows, dim], mean, rstd [local_rows] are the
//   caller's, as in nn::LayerNorm; the gradient sums work in the caller's TpScratch.
// - Backward blocks in the tp all-reduce with sequence parallelism only (every tp rank calls).
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

class TpLayerNorm {
 public:
  TpLayerNorm(int unit, int first_param, int64_t dim, const TpOptions& tp);

  int num_params() const { return 2; }
  // nn::LayerNorm's "<prefix>weight" and "<prefix>bias", replicated.
  std::vector<TpModuleParam> params(std::string_view prefix) const;

  // local_rows: the rows this rank holds (TpOptions::local_rows).
  void Forward(UnitAccess& access, const float* x, int64_t local_rows, float* y, float* mean,
               float* rstd) const;
  Status Backward(UnitAccess& access, Communicator& tp, const float* x, const float* mean,
                  const float* rstd, const float* dy, int64_t local_rows, float* dx,
                  TpScratch& scratch) const;

 private:
  int unit_;
  int first_param_;
  int64_t dim_;
  TpOptions tp_;
};

}  // namespace zs::tp
