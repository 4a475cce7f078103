#include "optimizers/adamw_reference.h"

#include <cmath>

namespace zs {

void AdamWReferenceStep(const AdamWHyper& h, float* master, float* exp_avg, float* exp_avg_sq,
                        const void* grad, DType grad_dtype, float grad_scale, void* param_out,
                        DType param_dtype, size_t n) {
  const double bc1 = 1.0 - std::pow(double(h.beta1), double(h.step));
  const double bc2 = 1.0 - std::pow(double(h.beta2), double(h.step));
  const float step_size = float(double(h.lr) / bc1);
  const float inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  const float decay = h.decoupled ? 1.0f - h.lr * h.weight_decay : 1.0f;
  for (size_t i = 0; i < n; ++i) {
    float w = master[i];
    float g = LoadAsFloat(grad, grad_dtype, i) * grad_scale;
    if (!h.decoupled) g += h.weight_decay * w;
    const float m = h.beta1 * exp_avg[i] + (1.0f - h.beta1) * g;
    const float v = h.beta2 * exp_avg_sq[i] + (1.0f - h.beta2) * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    w = w * decay - step_size * m / (std::sqrt(v) * inv_sqrt_bc2 + h.eps);
    master[i] = w;
    if (param_out != nullptr) StoreFromFloat(param_out, param_dtype, i, w);
  }
}

}  // namespace zs
