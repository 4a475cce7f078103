#include "runtime/nn/gelu.h"

#include <cmath>

namespace zs::nn {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// tanh through expf: glibc's tanhf (via expm1f) is several times slower and dominated the
// profile of a training step. Absolute error ~1e-7 near 0; saturates to +-1 without NaN
// (expf overflows to inf, 2 / inf = 0).
inline float Tanh(float u) { return 1.0f - 2.0f / (std::exp(2.0f * u) + 1.0f); }
}  // namespace

void GeluForward(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + Tanh(kSqrt2OverPi * (v + kCubic * v * v * v)));
  }
}

void GeluBackward(const float* x, const float* dy, int64_t n, float* dx) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = Tanh(kSqrt2OverPi * (v + kCubic * v * v * v));
    const float dt = (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * dt);
  }
}

}  // namespace zs::nn
