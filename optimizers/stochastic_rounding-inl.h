// Per-target (Highway) half of stochastic_rounding.h: include inside HWY_NAMESPACE after
// hwy/highway.h, once per target (the usual -inl.h include guard toggling).
#if defined(ZS_OPTIMIZERS_STOCHASTIC_ROUNDING_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ZS_OPTIMIZERS_STOCHASTIC_ROUNDING_INL_H_
#undef ZS_OPTIMIZERS_STOCHASTIC_ROUNDING_INL_H_
#else
#define ZS_OPTIMIZERS_STOCHASTIC_ROUNDING_INL_H_
#endif

#include "hwy/highway.h"
#include "optimizers/stochastic_rounding.h"

HWY_BEFORE_NAMESPACE();
namespace zs::sr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Fmix32AfterMul lane by lane.
template <class DU>
HWY_INLINE hn::Vec<DU> Fmix32AfterMulV(DU du, hn::Vec<DU> h) {
  h = hn::Xor(h, hn::ShiftRight<13>(h));
  h = hn::Mul(h, hn::Set(du, kFmix32C2));
  return hn::Xor(h, hn::ShiftRight<16>(h));
}

template <class DU>
HWY_INLINE hn::Vec<DU> Fmix32V(DU du, hn::Vec<DU> h) {
  h = hn::Xor(h, hn::ShiftRight<16>(h));
  return Fmix32AfterMulV(du, hn::Mul(h, hn::Set(du, kFmix32C1)));
}

// The 32-bit hashes of indices `idx` (low 32 bits) under `key`: SrHash lane by lane.
// k1 and k2 are the key's halves broadcast (loops hoist them).
template <class DU>
HWY_INLINE hn::Vec<DU> SrHashV(DU du, hn::Vec<DU> idx, hn::Vec<DU> k1, hn::Vec<DU> k2) {
  return hn::Xor(Fmix32V(du, hn::Xor(idx, k1)), k2);
}
template <class DU>
HWY_INLINE hn::Vec<DU> SrHashV(DU du, hn::Vec<DU> idx, SrKey key) {
  return SrHashV(du, idx, hn::Set(du, key.k1), hn::Set(du, key.k2));
}

// SrHashSplit lane by lane, from the sums of its two products (`product`); k2 broadcast
// ([Note: hashing within a 64K block]).
template <class DU>
HWY_INLINE hn::Vec<DU> SrHashFromProductV(DU du, hn::Vec<DU> product, hn::Vec<DU> k2) {
  return hn::Xor(Fmix32AfterMulV(du, product), k2);
}

// State `state_index`'s 16 random bits from the hashes (SrBits).
template <class DU>
HWY_INLINE hn::Vec<DU> SrBitsV(DU du, hn::Vec<DU> hash, int state_index) {
  return state_index == 0 ? hn::ShiftRight<16>(hash) : hn::And(hash, hn::Set(du, 0xffffu));
}

// Stochastic rounding of the fp32 lanes `u` (as bits) to bf16 with the 16 random bits `r` of
// each lane; the bf16 bits are the upper half of each 32-bit result (the lower half is
// garbage). Finite values cannot carry into the sign bit (at worst they truncate to inf, never
// NaN); inf keeps its bits (its low half is zero and r < 2^16) and NaN gets the quiet bit
// instead of r, so a payload held only in the low 16 bits stays NaN and an all-ones payload
// does not wrap to zero. Round to nearest even is the same with r = 0x7fff + (bit 16 of u).
template <class DU>
HWY_INLINE hn::Vec<DU> RoundToBF16Upper(DU du, hn::Vec<DU> u, hn::Vec<DU> r) {
  const hn::RebindToFloat<DU> df;
  const auto is_nan = hn::RebindMask(du, hn::IsNaN(hn::BitCast(df, u)));
  return hn::IfThenElse(is_nan, hn::Or(u, hn::Set(du, 0x00400000u)), hn::Add(u, r));
}

// RoundToBF16Upper for lanes known not to be NaN (inf allowed): the same bits without the
// select.
template <class DU>
HWY_INLINE hn::Vec<DU> RoundNonNaNToBF16Upper(DU /*du*/, hn::Vec<DU> u, hn::Vec<DU> r) {
  return hn::Add(u, r);
}

// The same bf16 bits in the low half of each lane (each lane <= 0xffff).
template <class DU>
HWY_INLINE hn::Vec<DU> RoundToBF16Bits(DU du, hn::Vec<DU> u, hn::Vec<DU> r) {
  return hn::ShiftRight<16>(RoundToBF16Upper(du, u, r));
}

}  // namespace HWY_NAMESPACE
}  // namespace zs::sr
HWY_AFTER_NAMESPACE();

#endif  // ZS_OPTIMIZERS_STOCHASTIC_ROUNDING_INL_H_
