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

// The bf16 bits (in 32-bit lanes, each <= 0xffff) of the fp32 lanes `u` (as bits) rounded
// stochastically with the random bits of indices `idx` (low 32 bits) under `key`. Finite values
// cannot carry into the sign bit (at worst they truncate to inf, never NaN); inf keeps its bits
// and NaN additionally gets the quiet bit, so a payload held only in the low 16 bits stays NaN.
template <class DU>
HWY_INLINE hn::Vec<DU> RoundToBF16Bits(DU du, hn::Vec<DU> u, hn::Vec<DU> idx, SrKey key) {
  const auto r = hn::ShiftRight<16>(
      Fmix32V(du, hn::Add(Fmix32V(du, hn::Xor(idx, hn::Set(du, key.k1))), hn::Set(du, key.k2))));
  const auto exp_mask = hn::Set(du, 0x7f800000u);
  const auto rounded = hn::ShiftRight<16>(hn::Add(u, r));
  const auto is_nan_payload = hn::Ne(hn::And(u, hn::Set(du, 0x007fffffu)), hn::Zero(du));
  const auto special =
      hn::Or(hn::ShiftRight<16>(u), hn::IfThenElseZero(is_nan_payload, hn::Set(du, 0x0040u)));
  const auto is_special = hn::Eq(hn::And(u, exp_mask), exp_mask);
  return hn::IfThenElse(is_special, special, rounded);
}

}  // namespace HWY_NAMESPACE
}  // namespace zs::sr
HWY_AFTER_NAMESPACE();

#endif  // ZS_OPTIMIZERS_STOCHASTIC_ROUNDING_INL_H_
