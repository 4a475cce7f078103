#include "runtime/parallel/tensor/tp_mlp.h"

#include <string>

#include "runtime/nn/gelu.h"

namespace zs::tp {

int64_t TpMlpActivations::bytes() const {
  return static_cast<int64_t>((pre.capacity() + act.capacity() + dact.capacity()) * sizeof(float));
}

StatusOr<TpMlp> TpMlp::Create(int unit, int first_param, int64_t hidden, const TpOptions& tp) {
  ZS_RETURN_IF_ERROR(tp.Validate());
  ZS_RETURN_IF_ERROR(tp.CheckDivisible("MLP width (4 * hidden)", 4 * hidden));
  ZS_ASSIGN_OR_RETURN(ColumnParallelLinear fc,
                      ColumnParallelLinear::Create(unit, first_param, hidden, 4 * hidden, tp));
  ZS_ASSIGN_OR_RETURN(RowParallelLinear proj,
                      RowParallelLinear::Create(unit, first_param + 2, 4 * hidden, hidden, tp,
                                                /*bias=*/true, nn::InitKind::kNormalResidual));
  return TpMlp(std::move(fc), std::move(proj));
}

TpMlp::TpMlp(ColumnParallelLinear fc, RowParallelLinear proj)
    : fc_(std::move(fc)), proj_(std::move(proj)) {}

std::vector<TpModuleParam> TpMlp::params(std::string_view prefix) const {
  std::vector<TpModuleParam> out = fc_.params(std::string(prefix) + "fc.");
  for (TpModuleParam& p : proj_.params(std::string(prefix) + "proj.")) out.push_back(std::move(p));
  return out;
}

Status TpMlp::Forward(UnitAccess& access, Communicator& tp, const float* x, int64_t rows,
                      TpBlockMlpActivations& mlp_act, TpScratch& scratch, float* y) const {
  TpMlpActivations& act = ActivationsAs<TpMlpActivations>(mlp_act, "TpMlp::Forward");
  const int64_t n = rows * fc_.out_local();
  act.rows = rows;
  act.pre.resize(n);
  act.act.resize(n);
  ZS_RETURN_IF_ERROR(fc_.Forward(access, tp, x, rows, scratch, act.pre.data()));
  nn::GeluForward(act.pre.data(), n, act.act.data());
  return proj_.Forward(access, tp, act.act.data(), rows, scratch, y);
}

Status TpMlp::Backward(UnitAccess& access, Communicator& tp, const float* x, const float* dy,
                       TpBlockMlpActivations& mlp_act, TpScratch& scratch, float* dx) const {
  TpMlpActivations& act = ActivationsAs<TpMlpActivations>(mlp_act, "TpMlp::Backward");
  ZS_CHECK(act.rows > 0, "TpMlp::Backward before Forward");
  const int64_t n = act.rows * fc_.out_local();
  act.dact.resize(n);
  ZS_RETURN_IF_ERROR(
      proj_.Backward(access, tp, act.act.data(), dy, act.rows, scratch, act.dact.data()));
  nn::GeluBackward(act.pre.data(), act.dact.data(), n, act.dact.data());
  return fc_.Backward(access, tp, x, act.dact.data(), act.rows, scratch, dx);
}

}  // namespace zs::tp
