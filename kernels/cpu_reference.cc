#include "kernels/cpu_reference.h"

#include <limits>

#include "kernels/float_bits.h"

namespace zs::kernels {
namespace {

using F32 = F32Element;
using BF16 = BF16Element;
using F16 = F16Element;

template <typename E>
bool ScaleAndCheck(const typename E::T* in, typename E::T* out, size_t n, float scale) {
  bool found = false;
  for (size_t i = 0; i < n; ++i) {
    const float v = E::Load(in[i]);
    const typename E::T stored = E::Store(v * scale);
    found |= !IsFiniteBits(FloatToBits(v)) || !IsFiniteBits(FloatToBits(E::Load(stored)));
    out[i] = stored;
  }
  return found;
}

template <typename E>
double GradSquaredNorm(const typename E::T* x, size_t n) {
  uint32_t max_abs = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = FloatToBits(E::Load(x[i])) & 0x7fffffffu;
    if (a > max_abs) max_abs = a;
  }
  if (max_abs > 0x7f800000u) return std::numeric_limits<double>::quiet_NaN();
  if (max_abs == 0x7f800000u) return std::numeric_limits<double>::infinity();
  if (n == 0) return 0.0;
  const int g = SquareSumScale(max_abs, n);
  U128 sum;
  for (size_t i = 0; i < n; ++i) sum = AddU128(sum, SquareTerm(E::Load(x[i]), g));
  return U128ScaledToDouble(sum, g);
}

}  // namespace

void CastF32ToBF16Reference(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBF16Bits(in[i]);
}
void CastBF16ToF32Reference(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = BF16BitsToFloat(in[i]);
}
void CastF32ToF16Reference(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToF16Bits(in[i]);
}
void CastF16ToF32Reference(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = F16BitsToFloat(in[i]);
}

bool ScaleAndCheckF32Reference(const float* in, float* out, size_t n, float scale) {
  return ScaleAndCheck<F32>(in, out, n, scale);
}
bool ScaleAndCheckBF16Reference(const uint16_t* in, uint16_t* out, size_t n, float scale) {
  return ScaleAndCheck<BF16>(in, out, n, scale);
}
bool ScaleAndCheckF16Reference(const uint16_t* in, uint16_t* out, size_t n, float scale) {
  return ScaleAndCheck<F16>(in, out, n, scale);
}

double GradSquaredNormF32Reference(const float* x, size_t n) { return GradSquaredNorm<F32>(x, n); }
double GradSquaredNormBF16Reference(const uint16_t* x, size_t n) {
  return GradSquaredNorm<BF16>(x, n);
}
double GradSquaredNormF16Reference(const uint16_t* x, size_t n) {
  return GradSquaredNorm<F16>(x, n);
}

}  // namespace zs::kernels
