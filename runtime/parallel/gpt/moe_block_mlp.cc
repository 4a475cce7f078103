#include "runtime/parallel/gpt/moe_block_mlp.h"

#include <algorithm>
#include <span>

#include "runtime/parallel/tensor/mappings.h"

namespace zs::parallel {
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

StatusOr<std::shared_ptr<const MoeBlockMlp>> MoeBlockMlp::Create(int moe_unit,
                                                                 const MoeConfig& config,
                                                                 const tp::TpOptions& tp,
                                                                 Communicator* ep) {
  ZS_ASSIGN_OR_RETURN(MoeMlp moe, MoeMlp::Create(moe_unit, 0, config, ep));
  return std::shared_ptr<const MoeBlockMlp>(new MoeBlockMlp(std::move(moe), moe_unit, tp, ep));
}

MoeBlockMlp::MoeBlockMlp(MoeMlp moe, int moe_unit, const tp::TpOptions& tp, Communicator* ep)
    : moe_(std::move(moe)), moe_unit_(moe_unit), tp_(tp), ep_(ep) {}

Status MoeBlockMlp::Forward(UnitAccess& access, Communicator& tp, const float* x, int64_t rows,
                            tp::TpBlockMlpActivations& mlp_act, tp::TpScratch& scratch,
                            float* y) const {
  MoeActivations& act =
      tp::ActivationsAs<MoeBlockMlpActivations>(mlp_act, "MoeBlockMlp::Forward").moe;
  if (!GathersRows()) return moe_.Forward(access, x, rows, y, act);
  // [Note: experts over tp] Every tp rank runs the experts on all rows, then keeps its block.
  const int64_t hidden = moe_.config().hidden;
  const int64_t local = tp_.local_rows(rows) * hidden, all = rows * hidden;
  float* x_rows = scratch.Full(all);
  float* y_rows = scratch.Rows(all);
  ZS_RETURN_IF_ERROR(tp::GatherFromSequenceRegionForward(
      tp, std::span<const float>(x, size_t(local)), std::span<float>(x_rows, size_t(all))));
  ZS_RETURN_IF_ERROR(moe_.Forward(access, x_rows, rows, y_rows, act));
  const float* mine = y_rows + tp_.first_row(rows) * hidden;
  std::copy(mine, mine + local, y);
  return OkStatus();
}

Status MoeBlockMlp::Backward(UnitAccess& access, Communicator& tp, const float* x, const float* dy,
                             tp::TpBlockMlpActivations& mlp_act, tp::TpScratch& scratch,
                             float* dx) const {
  MoeActivations& act =
      tp::ActivationsAs<MoeBlockMlpActivations>(mlp_act, "MoeBlockMlp::Backward").moe;
  if (!GathersRows()) return MoeBackward(access, x, dy, act, scratch, dx);
  // [Note: experts over tp] The output's gradient of all rows (each rank's block of it), the
  // experts' backward on all rows as in forward, and this rank's block of the input gradient:
  // every rank computed the whole input gradient, so nothing is summed over tp.
  const int64_t hidden = moe_.config().hidden;
  const int64_t rows = act.tokens(), local = tp_.local_rows(rows) * hidden;
  const int64_t all = rows * hidden;
  float* x_rows = scratch.Full(all);
  float* dy_rows = scratch.Rows(2 * all);
  float* dx_rows = dy_rows + all;
  ZS_RETURN_IF_ERROR(tp::GatherFromSequenceRegionForward(tp,
                                                         std::span<const float>(x, size_t(local)),
                                                         std::span<float>(x_rows, size_t(all)))
                         .WithContext("gathering the experts' input over tp again"));
  ZS_RETURN_IF_ERROR(tp::GatherFromSequenceRegionForward(tp,
                                                         std::span<const float>(dy, size_t(local)),
                                                         std::span<float>(dy_rows, size_t(all)))
                         .WithContext("gathering the experts' output gradient over tp"));
  ZS_RETURN_IF_ERROR(MoeBackward(access, x_rows, dy_rows, act, scratch, dx_rows));
  const float* mine = dx_rows + tp_.first_row(rows) * hidden;
  std::copy(mine, mine + local, dx);
  return OkStatus();
}

Status MoeBlockMlp::MoeBackward(UnitAccess& access, const float* x, const float* dy,
                                MoeActivations& act, tp::TpScratch& scratch, float* dx) const {
  if (ep_ == nullptr || ep_->size() == 1) return moe_.Backward(access, x, dy, dx, act);
  // The router's gradient from this micro-batch is this rank's tokens' part; every ep rank
  // holds the router alike, so each must add the sum over the ep group (the expert engine then
  // sums its edp group). MoeMlp writes the part into a zeroed buffer of its own
  // (RouterGradAccess), which is summed over ep and then added once.
  std::span<float> router = access.Grad(moe_unit_, 0);
  float* part = scratch.Partial(int64_t(router.size()));
  std::fill(part, part + router.size(), 0.0f);
  RouterGradAccess redirect(access, moe_unit_, 0, std::span<float>(part, router.size()));
  ZS_RETURN_IF_ERROR(moe_.Backward(redirect, x, dy, dx, act));
  ZS_RETURN_IF_ERROR(ep_->AllReduce(part, part, router.size(), DType::kF32, ReduceOp::kSum)
                         .WithContext("summing the router gradient over the ep group"));
  for (size_t i = 0; i < router.size(); ++i) router[i] += part[i];
  return OkStatus();
}

}  // namespace zs::parallel
