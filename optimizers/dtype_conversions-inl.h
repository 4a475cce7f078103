// Per-target (Highway) half of the fused optimizer kernels' dtype handling: the vector types,
// gradient loads (bf16 and f16 widened exactly as runtime/base/dtype.h's BF16ToFloat /
// F16ToFloat), bf16 loads two vectors at a time, the narrowing of two vectors into one of
// 16-bit values, and the param_out stores (exactly FloatToBF16 / FloatToF16, optionally
// non-temporal). Include at namespace scope after hwy/highway.h, once per target (the usual
// -inl.h include guard toggling); optimizer_kernels.cc is its one user.
//
// Contract: pure functions on registers and the pointers they are given; no allocation.
#if defined(ZS_OPTIMIZERS_DTYPE_CONVERSIONS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ZS_OPTIMIZERS_DTYPE_CONVERSIONS_INL_H_
#undef ZS_OPTIMIZERS_DTYPE_CONVERSIONS_INL_H_
#else
#define ZS_OPTIMIZERS_DTYPE_CONVERSIONS_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "optimizers/stochastic_rounding-inl.h"
#include "runtime/base/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace zs::internal {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DU16 = hn::Rebind<uint16_t, DF>;         // half a vector of u16: one per float lane
using DU16x2 = hn::Repartition<uint16_t, DF>;  // a full vector of u16: two per float lane
using VF = hn::Vec<DF>;
using VU = hn::Vec<DU>;

// Unsigned a > b for values below 2^31 (compared as int32, which every target has).
HWY_INLINE hn::Mask<DU> GreaterU31(VU a, VU b) {
  const DI di;
  const DU du;
  return hn::RebindMask(du, hn::Gt(hn::BitCast(di, a), hn::BitCast(di, b)));
}

// ---- gradient loads (exactly runtime/base/dtype.h's BF16ToFloat / F16ToFloat) --------------

// The fp32 values of the lanes bf16 at `in`.
HWY_INLINE VF WidenBF16(const uint16_t* in) {
  const DF df;
  const DU du;
  const DU16 du16;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(du16, in))));
}

// f32 and f16 gradients (bf16 ones load two vectors at a time: LoadGrad2).
template <DType G>
HWY_INLINE VF LoadGrad(const void* grad, size_t i) {
  const DF df;
  const DU du;
  const DU16 du16;
  static_assert(G != DType::kBF16);
  if constexpr (G == DType::kF32) {
    return hn::LoadU(df, static_cast<const float*>(grad) + i);
  } else {
    const DI di;
    const VU h = hn::PromoteTo(du, hn::LoadU(du16, static_cast<const uint16_t*>(grad) + i));
    const VU sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
    const VU exp_man = hn::And(h, hn::Set(du, 0x7fffu));
    // Normal: rebias the exponent (15 -> 127). Inf / NaN: all-ones exponent, mantissa kept.
    const VU normal = hn::Add(hn::ShiftLeft<13>(exp_man), hn::Set(du, 112u << 23));
    const VU inf_nan = hn::Or(hn::ShiftLeft<13>(exp_man), hn::Set(du, 0x7f800000u));
    // Subnormal: man * 2^-24, exact in float (and independent of denormals-are-zero modes).
    const VF sub = hn::Mul(hn::ConvertTo(df, hn::BitCast(di, exp_man)), hn::Set(df, 0x1p-24f));
    VU bits =
        hn::IfThenElse(GreaterU31(exp_man, hn::Set(du, 0x3ffu)), normal, hn::BitCast(du, sub));
    bits = hn::IfThenElse(GreaterU31(exp_man, hn::Set(du, 0x7bffu)), inf_nan, bits);
    return hn::BitCast(df, hn::Or(bits, sign));
  }
}

// ---- bf16 loads, two vectors at a time ------------------------------------------------------

// The fp32 values of the 2 * lanes bf16 at `in`: a from in[0, lanes), b from in[lanes, 2 lanes).
// On AVX-512 one load and one zero-masked word permute per vector put each bf16 in the upper
// half of its lane, where the one-vector widening takes a zero-extension and a shift.
HWY_INLINE void WidenBF16Pair(const uint16_t* in, VF& a, VF& b) {
#if HWY_TARGET == HWY_AVX3
  const __m512i x = _mm512_loadu_si512(in);
  // Word 2j + 1 of a takes word j of x, word 2j + 1 of b word 16 + j; even words become zero.
  const __m512i lo = _mm512_setr_epi32(0 << 16, 1 << 16, 2 << 16, 3 << 16, 4 << 16, 5 << 16,
                                       6 << 16, 7 << 16, 8 << 16, 9 << 16, 10 << 16, 11 << 16,
                                       12 << 16, 13 << 16, 14 << 16, 15 << 16);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(16 << 16));
  constexpr __mmask32 kOddWords = 0xaaaaaaaau;
  a = VF{_mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(kOddWords, lo, x))};
  b = VF{_mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(kOddWords, hi, x))};
#else
  a = WidenBF16(in);
  b = WidenBF16(in + hn::Lanes(DF()));
#endif
}

// The gradients (not yet scaled) of the two vectors at i and i + lanes.
template <DType G>
HWY_INLINE void LoadGrad2(const void* grad, size_t i, VF& a, VF& b) {
  if constexpr (G == DType::kBF16) {
    WidenBF16Pair(static_cast<const uint16_t*>(grad) + i, a, b);
  } else {
    a = LoadGrad<G>(grad, i);
    b = LoadGrad<G>(grad, i + hn::Lanes(DF()));
  }
}

// ---- narrowing to 16 bits, two vectors at a time -----------------------------------------------

// 16-bit results are computed in 32-bit lanes, bf16 bits in the upper half of each lane and f16
// bits in the lower half; one ConcatOdd or ConcatEven (a single two-source permute on AVX-512)
// packs the halves of two vectors, in order, into one full vector, where one vector at a time
// would need a shift and a saturating demotion each. `stream`: a non-temporal store, for which
// `out` must be aligned to the vector ([Note: streaming param_out]).
#if HWY_TARGET != HWY_SCALAR
template <bool kUpper>
HWY_INLINE hn::Vec<DU16x2> Pack16(VU lo, VU hi) {
  const DU16x2 d16;
  if constexpr (kUpper) return hn::ConcatOdd(d16, hn::BitCast(d16, hi), hn::BitCast(d16, lo));
  return hn::ConcatEven(d16, hn::BitCast(d16, hi), hn::BitCast(d16, lo));
}

// Stores one full vector of 16-bit values, non-temporally when `stream`.
HWY_INLINE void StorePacked16(hn::Vec<DU16x2> packed, uint16_t* out, bool stream) {
  const DU16x2 d16;
  if (stream) {
    hn::Stream(packed, d16, out);
  } else {
    hn::StoreU(packed, d16, out);
  }
}
#endif

template <bool kUpper>
HWY_INLINE void StoreHalves(VU lo, VU hi, uint16_t* out, bool stream) {
#if HWY_TARGET == HWY_SCALAR  // one lane: no two-lane u16 vector to permute into
  (void)stream;
  const DI di;
  const DU16 du16;
  const VU lo16 = kUpper ? hn::ShiftRight<16>(lo) : lo;
  const VU hi16 = kUpper ? hn::ShiftRight<16>(hi) : hi;
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, lo16)), du16, out);
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, hi16)), du16, out + 1);
#else
  StorePacked16(Pack16<kUpper>(lo, hi), out, stream);
#endif
}
HWY_INLINE void StoreUpperHalves(VU lo, VU hi, uint16_t* out, bool stream = false) {
  StoreHalves<true>(lo, hi, out, stream);
}
// Lanes <= 0xffff only (the lower half is the value).
HWY_INLINE void StoreLowerHalves(VU lo, VU hi, uint16_t* out, bool stream) {
  StoreHalves<false>(lo, hi, out, stream);
}

// Whether param_out stores from `out` on may stream: every store of StoreParams is one whole,
// aligned vector when the run's first one is.
HWY_INLINE bool StreamAligned(const void* out) {
  const DF df;
  return reinterpret_cast<uintptr_t>(out) % (hn::Lanes(df) * sizeof(float)) == 0;
}

// ---- param_out stores (exactly FloatToBF16 / FloatToF16) ----------------------------------

// kParamNone: no param_out; otherwise the DType's value.
inline constexpr int kParamNone = -1;

// bf16 round to nearest even: the stochastic rounding of RoundToBF16Upper with the fixed
// "random" bits 0x7fff + (lowest kept bit), which ties to even. kNaN: whether a lane may be NaN
// ([Note: NaN-free stores]).
template <bool kNaN>
HWY_INLINE VU BF16NearestUpper(VF w) {
  const DU du;
  const VU u = hn::BitCast(du, w);
  const VU rounding =
      hn::Add(hn::Set(du, 0x7fffu), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u)));
  if constexpr (kNaN) return sr::HWY_NAMESPACE::RoundToBF16Upper(du, u, rounding);
  return sr::HWY_NAMESPACE::RoundNonNaNToBF16Upper(du, u, rounding);
}

#if HWY_TARGET == HWY_AVX3
// BF16NearestUpper<false> of w0 and w1, packed as StoreUpperHalves packs them, computed on the
// packed 16-bit halves: with u = 2^16 H + L, the high half of u + 0x7fff + (H & 1) is H plus a
// carry that is set exactly when L + (H & 1) > 0x8000 (a saturating add keeps that test exact
// for L = 0xffff), and H + 1 cannot wrap because no lane is NaN. Two permutes and four
// operations where the 32-bit form takes one permute and eight.
HWY_INLINE hn::Vec<DU16x2> BF16NearestPacked(VF w0, VF w1) {
  const DU16x2 d16;
  const auto hi = hn::ConcatOdd(d16, hn::BitCast(d16, w1), hn::BitCast(d16, w0));
  const auto lo = hn::ConcatEven(d16, hn::BitCast(d16, w1), hn::BitCast(d16, w0));
  const auto one = hn::Set(d16, 1);
  const auto tested = hn::SaturatedAdd(lo, hn::And(hi, one));
  const __mmask32 carry = _mm512_cmpgt_epu16_mask(tested.raw, hn::Set(d16, 0x8000).raw);
  return hn::Vec<DU16x2>{_mm512_mask_add_epi16(hi.raw, carry, hi.raw, one.raw)};
}
#endif

HWY_INLINE VU F16Bits(VF w) {
  const DF df;
  const DI di;
  const DU du;
  const VU u = hn::BitCast(du, w);
  const VU sign = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 0x8000u));
  const VU abs = hn::And(u, hn::Set(du, 0x7fffffffu));
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even.
  const VU rounding =
      hn::Add(hn::Set(du, 0xfffu), hn::And(hn::ShiftRight<13>(abs), hn::Set(du, 1u)));
  VU bits = hn::ShiftRight<13>(hn::Add(hn::Sub(abs, hn::Set(du, 112u << 23)), rounding));
  // Subnormal (or zero) result: round abs * 2^24 to an integer, ties to even, as float does.
  const VF scaled = hn::Mul(hn::BitCast(df, abs), hn::Set(df, 0x1p24f));
  const VF r = hn::Sub(hn::Add(scaled, hn::Set(df, 0x1p23f)), hn::Set(df, 0x1p23f));
  const VU sub = hn::BitCast(du, hn::ConvertTo(di, r));
  bits = hn::IfThenElse(GreaterU31(hn::Set(du, 0x38800000u), abs), sub, bits);
  bits = hn::IfThenElse(GreaterU31(abs, hn::Set(du, 0x477fefffu)), hn::Set(du, 0x7c00u), bits);
  bits = hn::IfThenElse(GreaterU31(abs, hn::Set(du, 0x7f800000u)), hn::Set(du, 0x7e00u), bits);
  return hn::Or(bits, sign);
}

// Stores the param_out copies of two consecutive vectors w0 (at i) and w1 (at i + lanes);
// `stream`: non-temporal stores (StreamAligned(out) holds).
template <int O, bool kNaN>
HWY_INLINE void StoreParams(VF w0, VF w1, void* out, size_t i, bool stream) {
  const DF df;
  if constexpr (O == int(DType::kF32)) {
    float* p = static_cast<float*>(out) + i;
    if (stream) {
      hn::Stream(w0, df, p);
      hn::Stream(w1, df, p + hn::Lanes(df));
    } else {
      hn::StoreU(w0, df, p);
      hn::StoreU(w1, df, p + hn::Lanes(df));
    }
  } else if constexpr (O == int(DType::kBF16)) {
#if HWY_TARGET == HWY_AVX3
    if constexpr (!kNaN) {
      StorePacked16(BF16NearestPacked(w0, w1), static_cast<uint16_t*>(out) + i, stream);
      return;
    }
#endif
    StoreUpperHalves(BF16NearestUpper<kNaN>(w0), BF16NearestUpper<kNaN>(w1),
                     static_cast<uint16_t*>(out) + i, stream);
  } else {
    // f16 bits sit in the low half of each lane (every lane is <= 0xffff).
    StoreLowerHalves(F16Bits(w0), F16Bits(w1), static_cast<uint16_t*>(out) + i, stream);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace zs::internal
HWY_AFTER_NAMESPACE();

#endif  // ZS_OPTIMIZERS_DTYPE_CONVERSIONS_INL_H_
