// Per-target (Highway) int8 block codec: the decode of a vector of codes and the encode of one
// block of kQuantBlock values, shared by EncodeState / DecodeState (state_codec.cc) and the
// fused int8 optimizer kernel (optimizer_kernels.cc, [Note: fused int8 states]), so the two
// give the same codes and scales by construction. Include inside HWY_NAMESPACE after
// hwy/highway.h, once per target (the usual -inl.h include guard toggling); compile the
// including file with -ffp-contract=off (x * inv must round before 1.5 * 2^23 is added).
//
// Contract: [Note: int8 quantization] in optimizer_spec.h. Pure functions; no allocation.
#if defined(ZS_OPTIMIZERS_INT8_BLOCK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ZS_OPTIMIZERS_INT8_BLOCK_INL_H_
#undef ZS_OPTIMIZERS_INT8_BLOCK_INL_H_
#else
#define ZS_OPTIMIZERS_INT8_BLOCK_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace zs::int8q {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// code * scale for Lanes(df) codes at `codes`.
template <class DF>
HWY_INLINE hn::Vec<DF> DecodeInt8V(DF df, const int8_t* codes, hn::Vec<DF> scale) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<int8_t, DF> di8;
  return hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(di8, codes))), scale);
}

// max(m, |x|) on the bits of |x| as int32. For values without their sign bit the integer order
// is the float order, with every NaN above inf, so the max is associative even with NaN (a
// block with a NaN has a NaN max whatever the grouping; float max on x86 returns an operand
// that depends on the order) and takes one operation, as the float max does.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> MaxAbsBits(DF df, hn::Vec<hn::RebindToSigned<DF>> m,
                                                      hn::Vec<DF> x) {
  const hn::RebindToSigned<DF> di;
  (void)df;
  return hn::Max(m, hn::BitCast(di, hn::Abs(x)));
}

// The float whose bits are the largest lane of m (lanes are |x| bits).
template <class DF>
HWY_INLINE float MaxAbsOfLanes(DF /*df*/, hn::Vec<hn::RebindToSigned<DF>> m) {
  const hn::RebindToSigned<DF> di;
  const int32_t bits = hn::GetLane(hn::MaxOfLanes(di, m));
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// max(*max_abs, |src[i]|) over the whole vectors of `count` (*max_abs >= 0 on entry); returns
// the number done.
template <class DF>
HWY_INLINE size_t MaxAbsLanes(DF df, const float* src, size_t count, float* max_abs) {
  const hn::RebindToSigned<DF> di;
  const size_t lanes = hn::Lanes(df);
  // Four accumulators: one max chain would be latency-bound.
  auto m0 = hn::BitCast(di, hn::Set(df, *max_abs)), m1 = m0, m2 = m0, m3 = m0;
  size_t i = 0;
  for (; i + 4 * lanes <= count; i += 4 * lanes) {
    m0 = MaxAbsBits(df, m0, hn::LoadU(df, src + i));
    m1 = MaxAbsBits(df, m1, hn::LoadU(df, src + i + lanes));
    m2 = MaxAbsBits(df, m2, hn::LoadU(df, src + i + 2 * lanes));
    m3 = MaxAbsBits(df, m3, hn::LoadU(df, src + i + 3 * lanes));
  }
  for (; i + lanes <= count; i += lanes) m0 = MaxAbsBits(df, m0, hn::LoadU(df, src + i));
  *max_abs = MaxAbsOfLanes(df, hn::Max(hn::Max(m0, m1), hn::Max(m2, m3)));
  return i;
}

// Set for this target only (foreach_target.h includes this file once per target).
#undef ZS_INT8_PACK_FOUR
#if HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
#define ZS_INT8_PACK_FOUR 1
// Four vectors of int32 codes in [-127, 127] as one vector of int8 codes, in order. x86's
// saturating packs (exact on this range) work within 128-bit blocks, so after them dword
// 4 * j + v holds block j of input v; one lane permute puts the dwords in order (none is needed
// with one block). Four shuffles per four vectors, where TruncateTo takes three per vector.
// round-to-nearest-even(y) for |y| < 2^31 under the default rounding mode (cvtps2dq: one
// operation where the portable path adds and subtracts 1.5 * 2^23).
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> RoundToInt(DF /*df*/, hn::Vec<DF> y) {
#if HWY_TARGET == HWY_SSE4
  return {_mm_cvtps_epi32(y.raw)};
#elif HWY_TARGET == HWY_AVX2
  return {_mm256_cvtps_epi32(y.raw)};
#else
  return {_mm512_cvtps_epi32(y.raw)};
#endif
}

template <class DI>
HWY_INLINE hn::Vec<hn::Repartition<int8_t, DI>> PackFour(DI /*di*/, hn::Vec<DI> a, hn::Vec<DI> b,
                                                         hn::Vec<DI> c, hn::Vec<DI> d) {
#if HWY_TARGET == HWY_SSE4
  return {_mm_packs_epi16(_mm_packs_epi32(a.raw, b.raw), _mm_packs_epi32(c.raw, d.raw))};
#elif HWY_TARGET == HWY_AVX2
  const __m256i packed =
      _mm256_packs_epi16(_mm256_packs_epi32(a.raw, b.raw), _mm256_packs_epi32(c.raw, d.raw));
  return {_mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))};
#else
  const __m512i packed =
      _mm512_packs_epi16(_mm512_packs_epi32(a.raw, b.raw), _mm512_packs_epi32(c.raw, d.raw));
  return {_mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), packed)};
#endif
}
#endif

// code = round-to-nearest-even(x * inv) ([Note: int8 quantization]). |x| <= max|x| of the block
// and inv = fl(127 / max), so |x * inv| <= 127 * (1 + 2^-24)^2 < 127.5: no clamp is needed.
// Adding 1.5 * 2^23 rounds to an integer (ties to even, as the FPU rounds), which then sits
// in the low mantissa bits: the low byte of the float's bits is the two's-complement code. On
// x86 whole groups of four vectors convert with cvtps2dq instead, which rounds the same way in
// the default rounding mode (the mode std::nearbyint in the tests' reference follows).
template <class DF>
HWY_INLINE size_t QuantizeByReciprocal(DF df, const float* src, size_t count, float inv,
                                       int8_t* out) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint8_t, DF> du8;
  const size_t lanes = hn::Lanes(df);
  const auto vinv = hn::Set(df, inv);
  const auto magic = hn::Set(df, 12582912.0f);  // 1.5 * 2^23
  size_t i = 0;
#ifdef ZS_INT8_PACK_FOUR
  if constexpr (hn::MaxLanes(df) * sizeof(float) == HWY_MAX_BYTES) {  // full vectors only
    const hn::RebindToSigned<DF> di;
    const hn::Repartition<int8_t, DF> di8;
    auto code = [&](size_t at) { return RoundToInt(df, hn::Mul(hn::LoadU(df, src + at), vinv)); };
    for (; i + 4 * lanes <= count; i += 4 * lanes) {
      hn::StoreU(PackFour(di, code(i), code(i + lanes), code(i + 2 * lanes), code(i + 3 * lanes)),
                 di8, out + i);
    }
  }
#endif
  for (; i + lanes <= count; i += lanes) {
    const auto rounded = hn::Add(hn::Mul(hn::LoadU(df, src + i), vinv), magic);
    hn::StoreU(hn::TruncateTo(du8, hn::BitCast(du, rounded)), du8,
               reinterpret_cast<uint8_t*>(out) + i);
  }
  return i;
}

// code = round-to-nearest-even(x / scale) clamped: blocks so small that 127 / max overflows,
// and blocks holding inf or NaN.
template <class DF>
HWY_INLINE size_t QuantizeByDivision(DF df, const float* src, size_t count, float scale,
                                     int8_t* out) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<int8_t, DF> di8;
  const size_t lanes = hn::Lanes(df);
  const auto vscale = hn::Set(df, scale);
  const auto lo = hn::Set(df, -127.0f);
  const auto hi = hn::Set(df, 127.0f);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    const auto q = hn::Round(hn::Div(hn::LoadU(df, src + i), vscale));
    const auto code = hn::ConvertTo(di, hn::Min(hn::Max(q, lo), hi));
    hn::StoreU(hn::DemoteTo(di8, code), di8, out + i);
  }
  return i;
}

// Encodes one block of `count` (<= kQuantBlock) values whose max |value| is max_abs: its scale
// into *scale and its codes into codes[0, count). Whole vectors first, then the rest one lane at
// a time through the same ops, so a value's code never depends on its position in the block.
HWY_INLINE void EncodeInt8BlockWithMax(const float* block, size_t count, float max_abs,
                                       int8_t* codes, float* scale) {
  const hn::ScalableTag<float> df;
  const hn::CappedTag<float, 1> d1;
  const float s = max_abs / 127.0f;
  *scale = s;
  if (s == 0.0f) {  // all zeros (or only values so small that max/127 underflows)
    std::memset(codes, 0, count);
    return;
  }
  // One division per block, a multiplication per element ([Note: int8 quantization]). A block
  // with inf or NaN (max_abs not finite) takes the division too: x * 0 or x * NaN would make
  // NaN codes, which the x86 and portable conversions turn into different integers.
  const float inv = 127.0f / max_abs;
  size_t done;
  if (inv <= 3.0e38f && max_abs <= 3.4028235e38f) {
    done = QuantizeByReciprocal(df, block, count, inv, codes);
    QuantizeByReciprocal(d1, block + done, count - done, inv, codes + done);
  } else {
    done = QuantizeByDivision(df, block, count, s, codes);
    QuantizeByDivision(d1, block + done, count - done, s, codes + done);
  }
}

// The same, finding the max first.
HWY_INLINE void EncodeInt8Block(const float* block, size_t count, int8_t* codes, float* scale) {
  const hn::ScalableTag<float> df;
  const hn::CappedTag<float, 1> d1;
  float max_abs = 0.0f;
  const size_t done = MaxAbsLanes(df, block, count, &max_abs);
  MaxAbsLanes(d1, block + done, count - done, &max_abs);
  EncodeInt8BlockWithMax(block, count, max_abs, codes, scale);
}

}  // namespace HWY_NAMESPACE
}  // namespace zs::int8q
HWY_AFTER_NAMESPACE();

#endif  // ZS_OPTIMIZERS_INT8_BLOCK_INL_H_
