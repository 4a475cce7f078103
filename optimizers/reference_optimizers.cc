#include "optimizers/reference_optimizers.h"

#include <cmath>
#include <cstddef>

#include "runtime/base/check.h"

namespace zs {
namespace {

double Sign(double x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0); }

}  // namespace

ReferenceState ReferenceStep(const OptimizerHyper& h, const std::vector<float>& master,
                             const std::vector<float>& state0, const std::vector<float>& state1,
                             const std::vector<float>& grad, float grad_scale,
                             const std::vector<float>& weight_decay) {
  const size_t n = master.size();
  const int num_states = NumStates(h.kind, h.beta1);
  ZS_CHECK(grad.size() == n && weight_decay.size() == n, "grad {} / weight_decay {} vs n {}",
           grad.size(), weight_decay.size(), n);
  ZS_CHECK(num_states < 1 || state0.size() == n, "state0 has {} elements, n = {}", state0.size(),
           n);
  ZS_CHECK(num_states < 2 || state1.size() == n, "state1 has {} elements, n = {}", state1.size(),
           n);
  ZS_CHECK(h.step >= 1, "step {} (counted from 1)", h.step);

  ReferenceState out;
  out.master.resize(n);
  if (num_states >= 1) out.state0.resize(n);
  if (num_states >= 2) out.state1.resize(n);

  const double lr = h.lr, b1 = h.beta1, b2 = h.beta2, eps = h.eps;
  const double bc1 = 1.0 - std::pow(b1, double(h.step));
  const double bc2 = 1.0 - std::pow(b2, double(h.step));
  for (size_t i = 0; i < n; ++i) {
    double w = master[i];
    double g = double(grad[i]) * double(grad_scale);
    const double wd = weight_decay[i];
    switch (h.kind) {
      case OptimizerKind::kAdamW:
      case OptimizerKind::kAdam: {
        if (h.kind == OptimizerKind::kAdam) {
          g += wd * w;
        } else {
          w *= 1.0 - lr * wd;
        }
        const double m = b1 * state0[i] + (1.0 - b1) * g;
        const double v = b2 * state1[i] + (1.0 - b2) * g * g;
        w -= (lr / bc1) * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
        out.state0[i] = m;
        out.state1[i] = v;
        break;
      }
      case OptimizerKind::kSgd: {
        g += wd * w;
        if (num_states == 0) {
          w -= lr * g;
        } else {
          const double buf = h.step == 1 ? g : b1 * state0[i] + g;
          w -= lr * (h.nesterov ? g + b1 * buf : buf);
          out.state0[i] = buf;
        }
        break;
      }
      case OptimizerKind::kAdagrad: {
        g += wd * w;
        const double s = state0[i] + g * g;
        w -= lr * g / (std::sqrt(s) + eps);
        out.state0[i] = s;
        break;
      }
      case OptimizerKind::kLion: {
        w *= 1.0 - lr * wd;
        w -= lr * Sign(b1 * state0[i] + (1.0 - b1) * g);
        out.state0[i] = b2 * state0[i] + (1.0 - b2) * g;
        break;
      }
    }
    out.master[i] = w;
  }
  return out;
}

}  // namespace zs
