#include "runtime/nn/layer_norm.h"

#include <cmath>
#include <string>

namespace zs::nn {

LayerNorm::LayerNorm(int unit, int first_param, int64_t dim)
    : unit_(unit), first_param_(first_param), dim_(dim) {}

std::vector<ModuleParam> LayerNorm::params(std::string_view prefix) const {
  return {{ParamSpec{std::string(prefix) + "weight", {dim_}, false}, InitKind::kOnes},
          {ParamSpec{std::string(prefix) + "bias", {dim_}, false}, InitKind::kZeros}};
}

void LayerNormForward(const float* x, const float* g, const float* b, int64_t rows, int64_t dim,
                      float* y, float* mean, float* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float sum = 0.0f;
    for (int64_t j = 0; j < dim; ++j) sum += xr[j];
    const float m = sum / static_cast<float>(dim);
    float var = 0.0f;
    for (int64_t j = 0; j < dim; ++j) var += (xr[j] - m) * (xr[j] - m);
    var /= static_cast<float>(dim);
    const float s = 1.0f / std::sqrt(var + LayerNorm::kEps);
    float* yr = y + r * dim;
    for (int64_t j = 0; j < dim; ++j) yr[j] = (xr[j] - m) * s * g[j] + b[j];
    mean[r] = m;
    rstd[r] = s;
  }
}

void LayerNormBackward(const float* x, const float* mean, const float* rstd, const float* g,
                       const float* dy, int64_t rows, int64_t dim, float* dx, float* dg,
                       float* db) {
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    const float m = mean[r];
    const float s = rstd[r];
    // dxhat = dy * g; dx = s * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
    float sum_dxhat = 0.0f;
    float sum_dxhat_xhat = 0.0f;
    for (int64_t j = 0; j < dim; ++j) {
      const float xhat = (xr[j] - m) * s;
      const float dxhat = dyr[j] * g[j];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
      dg[j] += dyr[j] * xhat;
      db[j] += dyr[j];
    }
    const float mean_dxhat = sum_dxhat * inv_dim;
    const float mean_dxhat_xhat = sum_dxhat_xhat * inv_dim;
    float* dxr = dx + r * dim;
    for (int64_t j = 0; j < dim; ++j) {
      const float xhat = (xr[j] - m) * s;
      dxr[j] = s * (dyr[j] * g[j] - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
}

void LayerNorm::Forward(UnitAccess& access, const float* x, int64_t rows, float* y, float* mean,
                        float* rstd) const {
  LayerNormForward(x, access.Param(unit_, first_param_).data(),
                   access.Param(unit_, first_param_ + 1).data(), rows, dim_, y, mean, rstd);
}

void LayerNorm::Backward(UnitAccess& access, const float* x, const float* mean, const float* rstd,
                         const float* dy, int64_t rows, float* dx) const {
  LayerNormBackward(x, mean, rstd, access.Param(unit_, first_param_).data(), dy, rows, dim_, dx,
                    access.Grad(unit_, first_param_).data(),
                    access.Grad(unit_, first_param_ + 1).data());
}

}  // namespace zs::nn
