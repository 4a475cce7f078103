#include "runtime/parallel/tensor/tp_transformer_block.h"

#include <string>

#include "runtime/parallel/tensor/tp_mlp.h"

namespace zs::tp {

int64_t TpBlockActivations::bytes() const {
  size_t floats = 0;
  for (const std::vector<float>* v : {&ln1_out, &ln1_mean, &ln1_rstd, &x1, &ln2_out, &ln2_mean,
                                      &ln2_rstd, &scratch_a, &scratch_b}) {
    floats += v->capacity();
  }
  return static_cast<int64_t>(floats * sizeof(float)) + attn.bytes() + (mlp ? mlp->bytes() : 0);
}

StatusOr<TpTransformerBlock> TpTransformerBlock::Create(int unit, int first_param, int64_t hidden,
                                                        int64_t heads, const TpOptions& tp) {
  ZS_ASSIGN_OR_RETURN(TpAttention attn,
                      TpAttention::Create(unit, first_param + 2, hidden, heads, tp));
  ZS_ASSIGN_OR_RETURN(TpMlp mlp,
                      TpMlp::Create(unit, first_param + 4 + attn.num_params(), hidden, tp));
  return CreateWithMlp(unit, first_param, hidden, heads, tp,
                       std::make_shared<const TpMlp>(std::move(mlp)));
}

StatusOr<TpTransformerBlock> TpTransformerBlock::CreateWithMlp(
    int unit, int first_param, int64_t hidden, int64_t heads, const TpOptions& tp,
    std::shared_ptr<const TpBlockMlp> mlp) {
  ZS_CHECK(mlp != nullptr, "TpTransformerBlock: no MLP");
  ZS_ASSIGN_OR_RETURN(TpAttention attn,
                      TpAttention::Create(unit, first_param + 2, hidden, heads, tp));
  const int ln2 = first_param + 2 + attn.num_params();
  return TpTransformerBlock(hidden, tp, TpLayerNorm(unit, first_param, hidden, tp), std::move(attn),
                            TpLayerNorm(unit, ln2, hidden, tp), std::move(mlp));
}

TpTransformerBlock::TpTransformerBlock(int64_t hidden, const TpOptions& tp, TpLayerNorm ln1,
                                       TpAttention attn, TpLayerNorm ln2,
                                       std::shared_ptr<const TpBlockMlp> mlp)
    : hidden_(hidden),
      tp_(tp),
      ln1_(std::move(ln1)),
      attn_(std::move(attn)),
      ln2_(std::move(ln2)),
      mlp_(std::move(mlp)) {}

int TpTransformerBlock::num_params() const {
  return ln1_.num_params() + attn_.num_params() + ln2_.num_params() + mlp_->num_params();
}

std::vector<TpModuleParam> TpTransformerBlock::params(std::string_view prefix) const {
  const std::string p(prefix);
  std::vector<TpModuleParam> out;
  for (auto&& part : {ln1_.params(p + "ln1."), attn_.params(p + "attn."), ln2_.params(p + "ln2."),
                      mlp_->params(p + "mlp.")}) {
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

Status TpTransformerBlock::Forward(UnitAccess& access, Communicator& tp, const float* x,
                                   int64_t batch, int64_t seq, TpBlockActivations& act,
                                   TpScratch& scratch, float* y) const {
  const int64_t rows = batch * seq;
  ZS_RETURN_IF_ERROR(tp_.CheckRows(rows));
  const int64_t local = tp_.local_rows(rows), n = local * hidden_;
  act.batch = batch;
  act.seq = seq;
  act.ln1_out.resize(n);
  act.ln1_mean.resize(local);
  act.ln1_rstd.resize(local);
  act.x1.resize(n);
  act.ln2_out.resize(n);
  act.ln2_mean.resize(local);
  act.ln2_rstd.resize(local);
  act.scratch_a.resize(n);
  float* branch = act.scratch_a.data();
  ln1_.Forward(access, x, local, act.ln1_out.data(), act.ln1_mean.data(), act.ln1_rstd.data());
  ZS_RETURN_IF_ERROR(
      attn_.Forward(access, tp, act.ln1_out.data(), batch, seq, act.attn, scratch, branch));
  for (int64_t i = 0; i < n; ++i) act.x1[i] = x[i] + branch[i];
  ln2_.Forward(access, act.x1.data(), local, act.ln2_out.data(), act.ln2_mean.data(),
               act.ln2_rstd.data());
  if (act.mlp == nullptr) act.mlp = mlp_->NewActivations();
  ZS_RETURN_IF_ERROR(
      mlp_->Forward(access, tp, act.ln2_out.data(), rows, *act.mlp, scratch, branch));
  for (int64_t i = 0; i < n; ++i) y[i] = act.x1[i] + branch[i];
  return OkStatus();
}

Status TpTransformerBlock::Backward(UnitAccess& access, Communicator& tp, const float* x,
                                    const float* dy, TpBlockActivations& act, TpScratch& scratch,
                                    float* dx) const {
  ZS_CHECK(act.batch > 0, "TpTransformerBlock::Backward before Forward");
  const int64_t local = tp_.local_rows(act.batch * act.seq), n = local * hidden_;
  act.scratch_a.resize(n);
  act.scratch_b.resize(n);
  float* a = act.scratch_a.data();
  float* b = act.scratch_b.data();
  // y = x1 + mlp(ln2(x1)): dx1 = dy + ln2'(mlp'(dy)), kept in dx.
  ZS_RETURN_IF_ERROR(mlp_->Backward(access, tp, act.ln2_out.data(), dy, *act.mlp, scratch, a));
  ZS_RETURN_IF_ERROR(ln2_.Backward(access, tp, act.x1.data(), act.ln2_mean.data(),
                                   act.ln2_rstd.data(), a, local, b, scratch));
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] + b[i];
  // x1 = x + attn(ln1(x)): dx = dx1 + ln1'(attn'(dx1)).
  ZS_RETURN_IF_ERROR(attn_.Backward(access, tp, act.ln1_out.data(), dx, act.attn, scratch, a));
  ZS_RETURN_IF_ERROR(
      ln1_.Backward(access, tp, x, act.ln1_mean.data(), act.ln1_rstd.data(), a, local, b, scratch));
  for (int64_t i = 0; i < n; ++i) dx[i] += b[i];
  return OkStatus();
}

}  // namespace zs::tp
