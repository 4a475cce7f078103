#include "runtime/parallel/tensor/tp_transformer_block.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "runtime/parallel/tensor/mappings.h"

namespace zs::tp {
namespace {

// The caller's UnitAccess, except that one parameter's Grad() is a buffer of ours.
class RouterGradAccess final : public UnitAccess {
 public:
  RouterGradAccess(UnitAccess& base, int unit, int param, std::span<float> grad)
      : base_(base), unit_(unit), param_(param), grad_(grad) {}
  const ModelSpec& model() const override { return base_.model(); }
  Status BeginForward(int unit) override { return base_.BeginForward(unit); }
  Status EndForward(int unit) override { return base_.EndForward(unit); }
  Status BeginBackward(int unit) override { return base_.BeginBackward(unit); }
  Status EndBackward(int unit) override { return base_.EndBackward(unit); }
  std::span<const float> Param(int unit, int param) override { return base_.Param(unit, param); }
  std::span<float> Grad(int unit, int param) override {
    return unit == unit_ && param == param_ ? grad_ : base_.Grad(unit, param);
  }
  float backward_scale() const override { return base_.backward_scale(); }
  void SetMicroBatch(int micro_batch) override { base_.SetMicroBatch(micro_batch); }

 private:
  UnitAccess& base_;
  int unit_;
  int param_;
  std::span<float> grad_;
};

}  // namespace

int64_t TpBlockActivations::bytes() const {
  size_t floats = 0;
  for (const std::vector<float>* v : {&ln1_out, &ln1_mean, &ln1_rstd, &x1, &ln2_out, &ln2_mean,
                                      &ln2_rstd, &scratch_a, &scratch_b}) {
    floats += v->capacity();
  }
  return static_cast<int64_t>(floats * sizeof(float)) + attn.bytes() + mlp.bytes() + moe.bytes();
}

StatusOr<TpTransformerBlock> TpTransformerBlock::Create(int unit, int first_param, int64_t hidden,
                                                        int64_t heads, const TpOptions& tp) {
  ZS_ASSIGN_OR_RETURN(TpAttention attn,
                      TpAttention::Create(unit, first_param + 2, hidden, heads, tp));
  const int ln2 = first_param + 2 + attn.num_params();
  ZS_ASSIGN_OR_RETURN(TpMlp mlp, TpMlp::Create(unit, ln2 + 2, hidden, tp));
  return TpTransformerBlock(hidden, tp, TpLayerNorm(unit, first_param, hidden, tp), std::move(attn),
                            TpLayerNorm(unit, ln2, hidden, tp), std::move(mlp), std::nullopt,
                            nullptr, -1);
}

StatusOr<TpTransformerBlock> TpTransformerBlock::CreateMoe(int unit, int first_param,
                                                           int moe_unit, int64_t hidden,
                                                           int64_t heads, const TpOptions& tp,
                                                           const MoeConfig& moe,
                                                           Communicator* ep) {
  ZS_ASSIGN_OR_RETURN(TpAttention attn,
                      TpAttention::Create(unit, first_param + 2, hidden, heads, tp));
  const int ln2 = first_param + 2 + attn.num_params();
  ZS_ASSIGN_OR_RETURN(MoeMlp mlp, MoeMlp::Create(moe_unit, 0, moe, ep));
  return TpTransformerBlock(hidden, tp, TpLayerNorm(unit, first_param, hidden, tp), std::move(attn),
                            TpLayerNorm(unit, ln2, hidden, tp), std::nullopt, std::move(mlp), ep,
                            moe_unit);
}

TpTransformerBlock::TpTransformerBlock(int64_t hidden, const TpOptions& tp, TpLayerNorm ln1,
                                       TpAttention attn, TpLayerNorm ln2,
                                       std::optional<TpMlp> mlp, std::optional<MoeMlp> moe,
                                       Communicator* ep, int moe_unit)
    : hidden_(hidden),
      tp_(tp),
      ln1_(std::move(ln1)),
      attn_(std::move(attn)),
      ln2_(std::move(ln2)),
      mlp_(std::move(mlp)),
      moe_(std::move(moe)),
      ep_(ep),
      moe_unit_(moe_unit) {}

std::vector<nn::ModuleParam> TpTransformerBlock::moe_params() const {
  return moe_ ? moe_->params("moe.") : std::vector<nn::ModuleParam>{};
}

Status TpTransformerBlock::MlpForward(UnitAccess& access, Communicator& tp,
                                      TpBlockActivations& act, TpScratch& scratch, int64_t rows,
                                      float* y) const {
  if (mlp_) return mlp_->Forward(access, tp, act.ln2_out.data(), rows, act.mlp, scratch, y);
  if (!GathersRows()) return moe_->Forward(access, act.ln2_out.data(), rows, y, act.moe);
  // [Note: experts over tp] Every tp rank runs the experts on all rows, then keeps its block.
  const int64_t local = tp_.local_rows(rows) * hidden_, all = rows * hidden_;
  float* x_rows = scratch.Full(all);
  float* y_rows = scratch.Rows(all);
  ZS_RETURN_IF_ERROR(GatherFromSequenceRegionForward(
      tp, std::span<const float>(act.ln2_out.data(), size_t(local)),
      std::span<float>(x_rows, size_t(all))));
  ZS_RETURN_IF_ERROR(moe_->Forward(access, x_rows, rows, y_rows, act.moe));
  const float* mine = y_rows + tp_.first_row(rows) * hidden_;
  std::copy(mine, mine + local, y);
  return OkStatus();
}

bool TpTransformerBlock::GathersRows() const {
  return moe_.has_value() && tp_.sequence_parallel && tp_.size > 1;
}

Status TpTransformerBlock::MlpBackward(UnitAccess& access, Communicator& tp, const float* dy,
                                       TpBlockActivations& act, TpScratch& scratch,
                                       float* dx) const {
  if (mlp_) return mlp_->Backward(access, tp, act.ln2_out.data(), dy, act.mlp, scratch, dx);
  if (!GathersRows()) return MoeBackward(access, act.ln2_out.data(), dy, act, scratch, dx);
  // [Note: experts over tp] The output's gradient of all rows (each rank's block of it), the
  // experts' backward on all rows as in forward, and this rank's block of the input gradient:
  // every rank computed the whole input gradient, so nothing is summed over tp.
  const int64_t rows = act.batch * act.seq, local = tp_.local_rows(rows) * hidden_;
  const int64_t all = rows * hidden_;
  float* x_rows = scratch.Full(all);
  float* dy_rows = scratch.Rows(2 * all);
  float* dx_rows = dy_rows + all;
  ZS_RETURN_IF_ERROR(
      GatherFromSequenceRegionForward(tp, std::span<const float>(act.ln2_out.data(), size_t(local)),
                                      std::span<float>(x_rows, size_t(all)))
          .WithContext("gathering the experts' input over tp again"));
  ZS_RETURN_IF_ERROR(
      GatherFromSequenceRegionForward(tp, std::span<const float>(dy, size_t(local)),
                                      std::span<float>(dy_rows, size_t(all)))
          .WithContext("gathering the experts' output gradient over tp"));
  ZS_RETURN_IF_ERROR(MoeBackward(access, x_rows, dy_rows, act, scratch, dx_rows));
  const float* mine = dx_rows + tp_.first_row(rows) * hidden_;
  std::copy(mine, mine + local, dx);
  return OkStatus();
}

Status TpTransformerBlock::MoeBackward(UnitAccess& access, const float* x, const float* dy,
                                       TpBlockActivations& act, TpScratch& scratch,
                                       float* dx) const {
  if (ep_ == nullptr || ep_->size() == 1) return moe_->Backward(access, x, dy, dx, act.moe);
  // The router's gradient from this micro-batch is this rank's tokens' part; every ep rank
  // holds the router alike, so each must add the sum over the ep group (the expert engine then
  // sums its edp group). Grad() may already hold earlier micro-batches' sums (a pipeline
  // engine's reduce_per_step accumulation), so MoeMlp writes the router's part into a zeroed
  // buffer of its own (RouterGradAccess), which is summed over ep and then added once.
  std::span<float> router = access.Grad(moe_unit_, 0);
  float* part = scratch.Partial(int64_t(router.size()));
  std::fill(part, part + router.size(), 0.0f);
  RouterGradAccess redirect(access, moe_unit_, 0, std::span<float>(part, router.size()));
  ZS_RETURN_IF_ERROR(moe_->Backward(redirect, x, dy, dx, act.moe));
  ZS_RETURN_IF_ERROR(
      ep_->AllReduce(part, part, router.size(), DType::kF32, ReduceOp::kSum)
          .WithContext("summing the router gradient over the ep group"));
  for (size_t i = 0; i < router.size(); ++i) router[i] += part[i];
  return OkStatus();
}

int TpTransformerBlock::num_params() const {
  return ln1_.num_params() + attn_.num_params() + ln2_.num_params() +
         (mlp_ ? mlp_->num_params() : 0);
}

std::vector<TpModuleParam> TpTransformerBlock::params(std::string_view prefix) const {
  const std::string p(prefix);
  std::vector<TpModuleParam> out;
  for (auto&& part : {ln1_.params(p + "ln1."), attn_.params(p + "attn."), ln2_.params(p + "ln2."),
                      mlp_ ? mlp_->params(p + "mlp.") : std::vector<TpModuleParam>{}}) {
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
  ZS_RETURN_IF_ERROR(MlpForward(access, tp, act, scratch, rows, branch));
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
  ZS_RETURN_IF_ERROR(MlpBackward(access, tp, dy, act, scratch, a));
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
