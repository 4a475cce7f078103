#include "runtime/parallel/tensor/tp_attention.h"

#include <fmt/format.h>

#include <string>

#include "runtime/nn/causal_attention.h"

namespace zs::tp {

int64_t TpAttentionActivations::bytes() const {
  size_t floats = 0;
  for (const std::vector<float>* v : {&qkv_out, &probs, &ctx, &dctx, &dqkv, &dprobs}) {
    floats += v->capacity();
  }
  return static_cast<int64_t>(floats * sizeof(float));
}

StatusOr<TpAttention> TpAttention::Create(int unit, int first_param, int64_t hidden, int64_t heads,
                                          const TpOptions& tp) {
  ZS_RETURN_IF_ERROR(tp.Validate());
  if (heads <= 0 || hidden % heads != 0) {
    return InvalidArgumentError(
        fmt::format("tp: hidden {} is not a positive multiple of heads {}", hidden, heads));
  }
  ZS_RETURN_IF_ERROR(tp.CheckDivisible("attention heads", heads));
  ZS_ASSIGN_OR_RETURN(ColumnParallelLinear qkv,
                      ColumnParallelLinear::Create(unit, first_param, hidden, 3 * hidden, tp,
                                                   /*bias=*/true, nn::InitKind::kNormal,
                                                   /*blocks=*/3));
  ZS_ASSIGN_OR_RETURN(RowParallelLinear proj,
                      RowParallelLinear::Create(unit, first_param + 2, hidden, hidden, tp,
                                                /*bias=*/true, nn::InitKind::kNormalResidual));
  return TpAttention(hidden, heads, tp, std::move(qkv), std::move(proj));
}

TpAttention::TpAttention(int64_t hidden, int64_t heads, const TpOptions& tp,
                         ColumnParallelLinear qkv, RowParallelLinear proj)
    : hidden_(hidden), heads_(heads), tp_(tp), qkv_(std::move(qkv)), proj_(std::move(proj)) {}

std::vector<TpModuleParam> TpAttention::params(std::string_view prefix) const {
  std::vector<TpModuleParam> out = qkv_.params(std::string(prefix) + "qkv.");
  for (TpModuleParam& p : proj_.params(std::string(prefix) + "proj.")) out.push_back(std::move(p));
  return out;
}

Status TpAttention::Forward(UnitAccess& access, Communicator& tp, const float* x, int64_t batch,
                            int64_t seq, TpAttentionActivations& act, TpScratch& scratch,
                            float* y) const {
  const int64_t rows = batch * seq, heads = local_heads(), d = hidden_ / heads_;
  const int64_t w = heads * d;  // this rank's width of q, k, v and ctx
  ZS_RETURN_IF_ERROR(tp_.CheckRows(rows));
  act.batch = batch;
  act.seq = seq;
  act.qkv_out.resize(rows * 3 * w);
  act.probs.resize(batch * heads * seq * seq);
  act.ctx.resize(rows * w);
  ZS_RETURN_IF_ERROR(qkv_.Forward(access, tp, x, rows, scratch, act.qkv_out.data()));
  nn::CausalAttentionForward(act.qkv_out.data(), batch, seq, heads, d, act.probs.data(),
                             act.ctx.data());
  return proj_.Forward(access, tp, act.ctx.data(), rows, scratch, y);
}

Status TpAttention::Backward(UnitAccess& access, Communicator& tp, const float* x, const float* dy,
                             TpAttentionActivations& act, TpScratch& scratch, float* dx) const {
  ZS_CHECK(act.batch > 0, "TpAttention::Backward before Forward");
  const int64_t rows = act.batch * act.seq, heads = local_heads(), d = hidden_ / heads_;
  const int64_t w = heads * d;
  act.dctx.resize(rows * w);
  act.dqkv.resize(rows * 3 * w);
  act.dprobs.resize(act.seq * act.seq);
  ZS_RETURN_IF_ERROR(
      proj_.Backward(access, tp, act.ctx.data(), dy, rows, scratch, act.dctx.data()));
  nn::CausalAttentionBackward(act.qkv_out.data(), act.probs.data(), act.dctx.data(), act.batch,
                              act.seq, heads, d, act.dprobs.data(), act.dqkv.data());
  return qkv_.Backward(access, tp, x, act.dqkv.data(), rows, scratch, dx);
}

}  // namespace zs::tp
