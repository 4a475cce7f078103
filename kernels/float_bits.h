// Bit-exact scalar helpers shared by the CUDA kernels and their CPU references: f32 <-> bf16 /
// f16 conversions (round to nearest, ties to even) and the pieces of the order-independent
// squared norm (see [Note: exact squared norm] below).
//
// Contract
// - Pure functions on values, no state, no runtime headers (kernels are leaves). Each is
//   `__host__ __device__` under nvcc and plain inline C++ otherwise, and uses only integer
//   operations and exactly-rounded float operations, so the host and the device return the
//   same bits for the same input.
// - The conversions agree bit for bit with runtime/base/dtype.h (tests/kernels checks it):
//   NaN stays a quiet NaN with its sign, overflow goes to infinity, f16 subnormals are exact.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ZS_KERNEL_HD __host__ __device__ __forceinline__
#else
#define ZS_KERNEL_HD inline
#endif

namespace zs::kernels {

ZS_KERNEL_HD uint32_t FloatToBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

ZS_KERNEL_HD float BitsToFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// True unless the f32 bit pattern is an infinity or a NaN.
ZS_KERNEL_HD bool IsFiniteBits(uint32_t u) { return (u & 0x7fffffffu) < 0x7f800000u; }

ZS_KERNEL_HD uint16_t FloatToBF16Bits(float f) {
  const uint32_t u = FloatToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

ZS_KERNEL_HD float BF16BitsToFloat(uint16_t h) { return BitsToFloat(uint32_t{h} << 16); }

ZS_KERNEL_HD uint16_t FloatToF16Bits(float f) {
  const uint32_t u = FloatToBits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Below 2^-14 the result is an f16 subnormal: round abs * 2^24 to an integer, ties to even.
    if (abs <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (2^-25 is a tie to 0)
    const uint32_t exp = abs >> 23;       // 102..112
    const uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24
    uint32_t r = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;  // a carry into 0x400 is the smallest normal
    return uint16_t(sign | r);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  const uint32_t rounding = 0xfffu + ((abs >> 13) & 1u);
  return uint16_t(sign | ((abs - (112u << 23) + rounding) >> 13));
}

ZS_KERNEL_HD float F16BitsToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return BitsToFloat(sign | 0x7f800000u | (man << 13));  // inf or NaN
  if (exp != 0) return BitsToFloat(sign | ((exp + 112u) << 23) | (man << 13));
  if (man == 0) return BitsToFloat(sign);
  // Subnormal man * 2^-24: normalise so the top set bit (position p) becomes the implicit one.
  int p = 9;
  while (((man >> p) & 1u) == 0) --p;
  const uint32_t f32_exp = uint32_t(p + 103);
  return BitsToFloat(sign | (f32_exp << 23) | ((man << (23 - p)) & 0x7fffffu));
}

// Element traits: how each storage type loads to and stores from f32.
struct F32Element {
  using T = float;
  static ZS_KERNEL_HD float Load(float v) { return v; }
  static ZS_KERNEL_HD float Store(float v) { return v; }
};
struct BF16Element {
  using T = uint16_t;
  static ZS_KERNEL_HD float Load(uint16_t v) { return BF16BitsToFloat(v); }
  static ZS_KERNEL_HD uint16_t Store(float v) { return FloatToBF16Bits(v); }
};
struct F16Element {
  using T = uint16_t;
  static ZS_KERNEL_HD float Load(uint16_t v) { return F16BitsToFloat(v); }
  static ZS_KERNEL_HD uint16_t Store(float v) { return FloatToF16Bits(v); }
};

// [Note: exact squared norm]
// A float sum of squares depends on the order of the additions, so a GPU tree reduction and
// a CPU loop disagree in the last bits. Instead every square x^2 (exact in double: 48
// significant bits) is scaled by a power of two 2^-g and truncated to an unsigned 128-bit
// integer; integer addition is associative, so the sum is the same for any order, any
// chunking and any device. g is chosen from the largest |x| and the count n so that the sum
// cannot overflow 128 bits: each term is < 2^(128 - bit_width(n)). Terms are truncated to
// multiples of 2^g, an error below n * 2^g <= 2^-(126 - 2*bit_width(n)) relative to the largest
// square, far below double precision for any n < 2^40. The result is that integer times 2^g,
// rounded once to double.
struct U128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
};

ZS_KERNEL_HD U128 AddU128(U128 a, U128 b) {
  U128 r;
  r.lo = a.lo + b.lo;
  r.hi = a.hi + b.hi + (r.lo < a.lo ? 1u : 0u);
  return r;
}

ZS_KERNEL_HD int BitWidth64(uint64_t v) {
  int w = 0;
  while (v != 0) {
    ++w;
    v >>= 1;
  }
  return w;
}

// The scale exponent g for n values whose largest |x| has the f32 bit pattern max_abs_bits
// (finite). Every |x| < 2^(e+1) where e is the unbiased exponent of the largest.
ZS_KERNEL_HD int SquareSumScale(uint32_t max_abs_bits, uint64_t n) {
  const int field = int(max_abs_bits >> 23);
  const int e = field == 0 ? -127 : field - 127;
  return 2 * e + 2 + BitWidth64(n) - 128;
}

// 2^k as a double for |k| <= 1000, built from its bits (no library call, identical everywhere).
ZS_KERNEL_HD double PowerOfTwo(int k) {
  const uint64_t bits = uint64_t(k + 1023) << 52;
  double d;
  memcpy(&d, &bits, sizeof(d));
  return d;
}

// floor(x^2 * 2^-g) as a 128-bit integer. Exact: x^2 fits a double, the scale is a power of
// two that keeps it a normal double (g is in [-379, 192]), and the split below is exact.
ZS_KERNEL_HD U128 SquareTerm(float x, int g) {
  const double s = double(x) * double(x);
  // Scale in two steps so that each factor stays a normal double.
  const double t = (s * PowerOfTwo(-g / 2)) * PowerOfTwo(-(g - g / 2));  // < 2^127
  U128 r;
  const double hi = double(uint64_t(t * 0x1p-64));
  r.hi = uint64_t(hi);
  r.lo = uint64_t(t - hi * 0x1p64);  // the bits of t below 2^64: exact
  return r;
}

// The 128-bit sum times 2^g, rounded once to the nearest double (ties to even).
ZS_KERNEL_HD double U128ScaledToDouble(U128 s, int g) {
  if (s.hi == 0 && s.lo == 0) return 0.0;
  const int top = s.hi != 0 ? 64 + BitWidth64(s.hi) - 1 : BitWidth64(s.lo) - 1;
  uint64_t mantissa;
  int shift = 0;
  if (top <= 52) {
    mantissa = s.lo;
  } else {
    shift = top - 52;  // 1..75 bits to drop
    // mantissa = s >> shift; rest = the dropped bits compared with half an ulp.
    U128 m;
    if (shift >= 64) {
      m.lo = s.hi >> (shift - 64);
    } else {
      m.lo = (s.lo >> shift) | (s.hi << (64 - shift));
    }
    mantissa = m.lo;
    // Dropped bits: above half (1), exactly half (0) or below (-1).
    const int half_bit = shift - 1;
    const bool half_set =
        half_bit >= 64 ? ((s.hi >> (half_bit - 64)) & 1u) : ((s.lo >> half_bit) & 1u);
    bool below_nonzero;
    if (half_bit >= 64) {
      const uint64_t mask_hi = (half_bit - 64) == 0 ? 0 : ((uint64_t{1} << (half_bit - 64)) - 1);
      below_nonzero = (s.hi & mask_hi) != 0 || s.lo != 0;
    } else {
      const uint64_t mask_lo = half_bit == 0 ? 0 : ((uint64_t{1} << half_bit) - 1);
      below_nonzero = (s.lo & mask_lo) != 0;
    }
    if (half_set && (below_nonzero || (mantissa & 1u))) ++mantissa;
    if (mantissa == (uint64_t{1} << 53)) {
      mantissa >>= 1;
      ++shift;
    }
  }
  // mantissa < 2^53 is exact in a double; the power-of-two scale keeps it in range.
  const int k = g + shift;
  return (double(mantissa) * PowerOfTwo(k / 2)) * PowerOfTwo(k - k / 2);
}

}  // namespace zs::kernels
