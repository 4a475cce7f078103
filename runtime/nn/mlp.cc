#include "runtime/nn/mlp.h"

#include <string>

#include "runtime/base/check.h"
#include "runtime/nn/gelu.h"

namespace zs::nn {

Mlp::Mlp(int unit, int first_param, int64_t hidden)
    : hidden_(hidden),
      fc_(unit, first_param, hidden, 4 * hidden),
      proj_(unit, first_param + 2, 4 * hidden, hidden, /*bias=*/true, InitKind::kNormalResidual) {}

std::vector<ModuleParam> Mlp::params(std::string_view prefix) const {
  std::vector<ModuleParam> out = fc_.params(std::string(prefix) + "fc.");
  for (ModuleParam& p : proj_.params(std::string(prefix) + "proj.")) out.push_back(std::move(p));
  return out;
}

void Mlp::Forward(UnitAccess& access, const float* x, int64_t rows, float* y) {
  rows_ = rows;
  pre_.resize(rows * 4 * hidden_);
  act_.resize(rows * 4 * hidden_);
  fc_.Forward(access, x, rows, pre_.data());
  GeluForward(pre_.data(), rows * 4 * hidden_, act_.data());
  proj_.Forward(access, act_.data(), rows, y);
}

void Mlp::Backward(UnitAccess& access, const float* x, const float* dy, float* dx) {
  ZS_CHECK(rows_ > 0, "Mlp::Backward before Forward");
  dact_.resize(rows_ * 4 * hidden_);
  proj_.Backward(access, act_.data(), dy, rows_, dact_.data());
  GeluBackward(pre_.data(), dact_.data(), rows_ * 4 * hidden_, dact_.data());
  fc_.Backward(access, x, dact_.data(), rows_, dx);
}

int64_t Mlp::activation_bytes() const {
  return static_cast<int64_t>((pre_.capacity() + act_.capacity() + dact_.capacity()) *
                              sizeof(float));
}

}  // namespace zs::nn
