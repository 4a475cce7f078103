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

template <class DU>
HWY_INLINE hn::Vec<DU> Fmix32V(DU du, hn::Vec<DU> h) {
  h = hn::Xor(h, hn::ShiftRight<16>(h));
  h = hn::Mul(h, hn::Set(du, 0x85ebca6bu));
  h = hn::Xor(h, hn::ShiftRight<13>(h));
  h = hn::Mul(h, hn::Set(du, 0xc2b2ae35u));
  return hn::Xor(h, hn::ShiftRight<16>(h));
}

// The 32-bit hashes of indices `idx` (low 32 bits) under `key`: SrHash lane by lane.
template <class DU>
HWY_INLINE hn::Vec<DU> SrHashV(DU du, hn::Vec<DU> idx, SrKey key) {
  return Fmix32V(du, hn::Add(Fmix32V(du, hn::Xor(idx, hn::Set(du, key.k1))), hn::Set(du, key.k2)));
}

// State `state_index`'s 16 random bits from the hashes (SrBits).
template <class DU>
HWY_INLINE hn::Vec<DU> SrBitsV(DU du, hn::Vec<DU> hash, int state_index) {
  return state_index == 0 ? hn::ShiftRight<16>(hash) : hn::And(hash, hn::Set(du, 0xffffu));
}

// The bf16 bits (in 32-bit lanes, each <= 0xffff) of the fp32 lanes `u` (as bits) rounded
// stochastically with the 16 random bits `r` of each lane. Finite values cannot carry into the
// sign bit (at worst they truncate to inf, never NaN); inf keeps its bits (its low half is
// zero and r < 2^16) and NaN gets the quiet bit instead of r, so a payload held only in the
// low 16 bits stays NaN.
template <class DU>
HWY_INLINE hn::Vec<DU> RoundToBF16Bits(DU du, hn::Vec<DU> u, hn::Vec<DU> r) {
  const hn::RebindToSigned<DU> di;
  const auto abs = hn::And(u, hn::Set(du, 0x7fffffffu));
  const auto is_nan = hn::RebindMask(
      du, hn::Gt(hn::BitCast(di, abs), hn::Set(di, int32_t{0x7f800000})));
  return hn::ShiftRight<16>(
      hn::IfThenElse(is_nan, hn::Or(u, hn::Set(du, 0x00400000u)), hn::Add(u, r)));
}

}  // namespace HWY_NAMESPACE
}  // namespace zs::sr
HWY_AFTER_NAMESPACE();

#endif  // ZS_OPTIMIZERS_STOCHASTIC_ROUNDING_INL_H_
