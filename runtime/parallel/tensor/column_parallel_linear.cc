#include "runtime/parallel/tensor/column_parallel_linear.h"

#include <fmt/format.h>

#include "runtime/nn/gemm.h"
#include "runtime/nn/linear.h"
#include "runtime/parallel/tensor/mappings.h"

namespace zs::tp {

StatusOr<ColumnParallelLinear> ColumnParallelLinear::Create(int unit, int first_param, int64_t in,
                                                            int64_t out, const TpOptions& tp,
                                                            bool bias, nn::InitKind weight_init,
                                                            int blocks) {
  ZS_RETURN_IF_ERROR(tp.Validate());
  if (blocks < 1 || out % blocks != 0) {
    return InvalidArgumentError(
        fmt::format("tp: column-parallel out {} is not {} equal blocks", out, blocks));
  }
  ZS_RETURN_IF_ERROR(tp.CheckDivisible(
      blocks == 1 ? "column-parallel out" : "column-parallel out per block", out / blocks));
  return ColumnParallelLinear(unit, first_param, in, out, tp, bias, weight_init, blocks);
}

ColumnParallelLinear::ColumnParallelLinear(int unit, int first_param, int64_t in, int64_t out,
                                           const TpOptions& tp, bool bias, nn::InitKind weight_init,
                                           int blocks)
    : unit_(unit),
      first_param_(first_param),
      in_(in),
      out_(out),
      tp_(tp),
      bias_(bias),
      weight_init_(weight_init),
      blocks_(blocks) {}

std::vector<TpModuleParam> ColumnParallelLinear::params(std::string_view prefix) const {
  const std::vector<nn::ModuleParam> full =
      nn::Linear(unit_, first_param_, in_, out_, bias_, weight_init_).params(prefix);
  std::vector<TpModuleParam> out;
  out.push_back(MakeTpParam(full[0], TpParamLayout::SplitRows({out_, in_}, blocks_), tp_.size));
  if (bias_)
    out.push_back(MakeTpParam(full[1], TpParamLayout::SplitRows({out_}, blocks_), tp_.size));
  return out;
}

Status ColumnParallelLinear::Forward(UnitAccess& access, Communicator& tp, const float* x,
                                     int64_t rows, TpScratch& scratch, float* y) const {
  std::span<const float> b;
  if (bias_) b = access.Param(unit_, first_param_ + 1);
  return ForwardWithWeights(tp, tp_.sequence_parallel, access.Param(unit_, first_param_), b, in_, x,
                            rows, scratch, y);
}

Status ColumnParallelLinear::Backward(UnitAccess& access, Communicator& tp, const float* x,
                                      const float* dy, int64_t rows, TpScratch& scratch,
                                      float* dx) const {
  std::span<float> db;
  if (bias_) db = access.Grad(unit_, first_param_ + 1);
  return BackwardWithWeights(tp, tp_.sequence_parallel, access.Param(unit_, first_param_),
                             access.Grad(unit_, first_param_), db, in_, x, dy, rows, scratch, dx);
}

Status ColumnParallelLinear::ForwardWithWeights(Communicator& tp, bool sequence_parallel,
                                                std::span<const float> w, std::span<const float> b,
                                                int64_t in, const float* x, int64_t rows,
                                                TpScratch& scratch, float* y) {
  const int64_t out = static_cast<int64_t>(w.size()) / in;
  ZS_CHECK(out * in == static_cast<int64_t>(w.size()) && (b.empty() || b.size() == size_t(out)),
           "column-parallel weights: {} and {} floats for in {}", w.size(), b.size(), in);
  ZS_RETURN_IF_ERROR(TpOptions::Of(tp, sequence_parallel).CheckRows(rows));
  if (sequence_parallel) {
    float* x_full = scratch.Full(rows * in);
    ZS_RETURN_IF_ERROR(GatherFromSequenceRegionForward(
        tp, std::span(x, static_cast<size_t>(rows / tp.size() * in)),
        std::span(x_full, static_cast<size_t>(rows * in))));
    x = x_full;
  }
  nn::Sgemm(false, true, rows, out, in, 1.0f, x, in, w.data(), in, 0.0f, y, out);
  if (!b.empty()) {
    for (int64_t r = 0; r < rows; ++r) {
      float* yr = y + r * out;
      for (int64_t j = 0; j < out; ++j) yr[j] += b[j];
    }
  }
  return OkStatus();
}

Status ColumnParallelLinear::BackwardWithWeights(Communicator& tp, bool sequence_parallel,
                                                 std::span<const float> w, std::span<float> dw,
                                                 std::span<float> db, int64_t in, const float* x,
                                                 const float* dy, int64_t rows, TpScratch& scratch,
                                                 float* dx) {
  const int64_t out = static_cast<int64_t>(w.size()) / in;
  ZS_CHECK(dw.size() == w.size() && (db.empty() || db.size() == size_t(out)),
           "column-parallel gradients: {} and {} floats for a [{}, {}] weight", dw.size(),
           db.size(), out, in);
  ZS_RETURN_IF_ERROR(TpOptions::Of(tp, sequence_parallel).CheckRows(rows));
  if (sequence_parallel) {  // gather the input again rather than keep it gathered
    float* x_full = scratch.Full(rows * in);
    ZS_RETURN_IF_ERROR(GatherFromSequenceRegionForward(
        tp, std::span(x, static_cast<size_t>(rows / tp.size() * in)),
        std::span(x_full, static_cast<size_t>(rows * in))));
    x = x_full;
  }
  nn::Sgemm(true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw.data(), in);
  for (int64_t r = 0; !db.empty() && r < rows; ++r) {
    const float* dyr = dy + r * out;
    for (int64_t j = 0; j < out; ++j) db[j] += dyr[j];
  }
  if (dx == nullptr) return OkStatus();
  if (!sequence_parallel) {  // dx = dy W_r, a partial sum over the ranks' output columns
    nn::Sgemm(false, false, rows, in, out, 1.0f, dy, out, w.data(), in, 0.0f, dx, in);
    return CopyToTpRegionBackward(tp, std::span(dx, static_cast<size_t>(rows * in)));
  }
  float* dx_full = scratch.Partial(rows * in);
  nn::Sgemm(false, false, rows, in, out, 1.0f, dy, out, w.data(), in, 0.0f, dx_full, in);
  return GatherFromSequenceRegionBackward(
      tp, std::span(dx_full, static_cast<size_t>(rows * in)),
      std::span(dx, static_cast<size_t>(rows / tp.size() * in)));
}

}  // namespace zs::tp
