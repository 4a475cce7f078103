#include "runtime/parallel/tensor/tp_layer_norm.h"

#include <algorithm>

#include "runtime/nn/layer_norm.h"
#include "runtime/parallel/tensor/mappings.h"

namespace zs::tp {

TpLayerNorm::TpLayerNorm(int unit, int first_param, int64_t dim, const TpOptions& tp)
    : unit_(unit), first_param_(first_param), dim_(dim), tp_(tp) {}

std::vector<TpModuleParam> TpLayerNorm::params(std::string_view prefix) const {
  std::vector<TpModuleParam> out;
  for (const nn::ModuleParam& p : nn::LayerNorm(unit_, first_param_, dim_).params(prefix)) {
    out.push_back(MakeTpParam(p, TpParamLayout::Replicated({dim_}), tp_.size));
  }
  return out;
}

void TpLayerNorm::Forward(UnitAccess& access, const float* x, int64_t local_rows, float* y,
                          float* mean, float* rstd) const {
  nn::LayerNormForward(x, access.Param(unit_, first_param_).data(),
                       access.Param(unit_, first_param_ + 1).data(), local_rows, dim_, y, mean,
                       rstd);
}

Status TpLayerNorm::Backward(UnitAccess& access, Communicator& tp, const float* x,
                             const float* mean, const float* rstd, const float* dy,
                             int64_t local_rows, float* dx, TpScratch& scratch) const {
  const float* g = access.Param(unit_, first_param_).data();
  std::span<float> dg = access.Grad(unit_, first_param_);
  std::span<float> db = access.Grad(unit_, first_param_ + 1);
  if (!tp_.sequence_parallel) {  // every rank saw every row: its gradient is the full one
    nn::LayerNormBackward(x, mean, rstd, g, dy, local_rows, dim_, dx, dg.data(), db.data());
    return OkStatus();
  }
  // Gain and bias partial sums side by side, so one all-reduce sums both.
  float* partial = scratch.Partial(2 * dim_);
  std::fill(partial, partial + 2 * dim_, 0.0f);
  nn::LayerNormBackward(x, mean, rstd, g, dy, local_rows, dim_, dx, partial, partial + dim_);
  return AccumulateReplicatedGrads(tp, true, std::span(partial, static_cast<size_t>(2 * dim_)),
                                   {dg, db});
}

}  // namespace zs::tp
