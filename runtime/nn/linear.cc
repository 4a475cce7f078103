#include "runtime/nn/linear.h"

#include <string>

#include "runtime/nn/gemm.h"

namespace zs::nn {

Linear::Linear(int unit, int first_param, int64_t in, int64_t out, bool bias, InitKind weight_init)
    : unit_(unit),
      first_param_(first_param),
      in_(in),
      out_(out),
      bias_(bias),
      weight_init_(weight_init) {}

std::vector<ModuleParam> Linear::params(std::string_view prefix) const {
  std::vector<ModuleParam> out;
  out.push_back({ParamSpec{std::string(prefix) + "weight", {out_, in_}, true}, weight_init_});
  if (bias_)
    out.push_back({ParamSpec{std::string(prefix) + "bias", {out_}, false}, InitKind::kZeros});
  return out;
}

void Linear::Forward(UnitAccess& access, const float* x, int64_t rows, float* y) const {
  std::span<const float> w = access.Param(unit_, first_param_);
  ZS_DCHECK(static_cast<int64_t>(w.size()) == out_ * in_);
  Sgemm(false, true, rows, out_, in_, 1.0f, x, in_, w.data(), in_, 0.0f, y, out_);
  if (bias_) {
    const float* b = access.Param(unit_, first_param_ + 1).data();
    for (int64_t r = 0; r < rows; ++r) {
      float* yr = y + r * out_;
      for (int64_t j = 0; j < out_; ++j) yr[j] += b[j];
    }
  }
}

void Linear::Backward(UnitAccess& access, const float* x, const float* dy, int64_t rows,
                      float* dx) const {
  std::span<const float> w = access.Param(unit_, first_param_);
  if (dx != nullptr)
    Sgemm(false, false, rows, in_, out_, 1.0f, dy, out_, w.data(), in_, 0.0f, dx, in_);
  float* dw = access.Grad(unit_, first_param_).data();
  Sgemm(true, false, out_, in_, rows, 1.0f, dy, out_, x, in_, 1.0f, dw, in_);
  if (bias_) {
    float* db = access.Grad(unit_, first_param_ + 1).data();
    for (int64_t r = 0; r < rows; ++r) {
      const float* dyr = dy + r * out_;
      for (int64_t j = 0; j < out_; ++j) db[j] += dyr[j];
    }
  }
}

}  // namespace zs::nn
