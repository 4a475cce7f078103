#include "runtime/parallel/tensor/row_parallel_linear.h"

#include <algorithm>

#include "runtime/nn/gemm.h"
#include "runtime/nn/linear.h"
#include "runtime/parallel/tensor/mappings.h"

namespace zs::tp {

StatusOr<RowParallelLinear> RowParallelLinear::Create(int unit, int first_param, int64_t in,
                                                      int64_t out, const TpOptions& tp, bool bias,
                                                      nn::InitKind weight_init) {
  ZS_RETURN_IF_ERROR(tp.Validate());
  ZS_RETURN_IF_ERROR(tp.CheckDivisible("row-parallel in", in));
  return RowParallelLinear(unit, first_param, in, out, tp, bias, weight_init);
}

RowParallelLinear::RowParallelLinear(int unit, int first_param, int64_t in, int64_t out,
                                     const TpOptions& tp, bool bias, nn::InitKind weight_init)
    : unit_(unit),
      first_param_(first_param),
      in_(in),
      out_(out),
      tp_(tp),
      bias_(bias),
      weight_init_(weight_init) {}

std::vector<TpModuleParam> RowParallelLinear::params(std::string_view prefix) const {
  const std::vector<nn::ModuleParam> full =
      nn::Linear(unit_, first_param_, in_, out_, bias_, weight_init_).params(prefix);
  std::vector<TpModuleParam> out;
  out.push_back(MakeTpParam(full[0], TpParamLayout::SplitColumns({out_, in_}), tp_.size));
  if (bias_) out.push_back(MakeTpParam(full[1], TpParamLayout::Replicated({out_}), tp_.size));
  return out;
}

Status RowParallelLinear::Forward(UnitAccess& access, Communicator& tp, const float* x,
                                  int64_t rows, TpScratch& scratch, float* y) const {
  ZS_RETURN_IF_ERROR(tp_.CheckRows(rows));
  const int64_t in = in_local(), out = out_, local_rows = tp_.local_rows(rows);
  const float* w = access.Param(unit_, first_param_).data();
  if (tp_.sequence_parallel) {
    float* y_full = scratch.Full(rows * out);
    nn::Sgemm(false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y_full, out);
    ZS_RETURN_IF_ERROR(
        ReduceScatterToSequenceRegionForward(tp, std::span(y_full, static_cast<size_t>(rows * out)),
                                             std::span(y, static_cast<size_t>(local_rows * out))));
  } else {
    nn::Sgemm(false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
    ZS_RETURN_IF_ERROR(
        ReduceFromTpRegionForward(tp, std::span(y, static_cast<size_t>(rows * out))));
  }
  if (bias_) {
    const float* b = access.Param(unit_, first_param_ + 1).data();
    for (int64_t r = 0; r < local_rows; ++r) {
      float* yr = y + r * out;
      for (int64_t j = 0; j < out; ++j) yr[j] += b[j];
    }
  }
  return OkStatus();
}

Status RowParallelLinear::Backward(UnitAccess& access, Communicator& tp, const float* x,
                                   const float* dy, int64_t rows, TpScratch& scratch,
                                   float* dx) const {
  ZS_RETURN_IF_ERROR(tp_.CheckRows(rows));
  const int64_t in = in_local(), out = out_, local_rows = tp_.local_rows(rows);
  if (bias_) {  // the bias saw this rank's rows: all of them, or its sequence block
    float* db = scratch.Partial(out);
    std::fill(db, db + out, 0.0f);
    for (int64_t r = 0; r < local_rows; ++r) {
      const float* dyr = dy + r * out;
      for (int64_t j = 0; j < out; ++j) db[j] += dyr[j];
    }
    ZS_RETURN_IF_ERROR(AccumulateReplicatedGrads(tp, tp_.sequence_parallel,
                                                 std::span(db, static_cast<size_t>(out)),
                                                 {access.Grad(unit_, first_param_ + 1)}));
  }
  if (tp_.sequence_parallel) {
    float* dy_full = scratch.Full(rows * out);
    ZS_RETURN_IF_ERROR(ReduceScatterToSequenceRegionBackward(
        tp, std::span(dy, static_cast<size_t>(local_rows * out)),
        std::span(dy_full, static_cast<size_t>(rows * out))));
    dy = dy_full;
  }
  const float* w = access.Param(unit_, first_param_).data();
  float* dw = access.Grad(unit_, first_param_).data();
  nn::Sgemm(true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw, in);
  if (dx != nullptr) nn::Sgemm(false, false, rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
  return OkStatus();
}

}  // namespace zs::tp
