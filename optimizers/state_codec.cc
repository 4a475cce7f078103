// State codecs (state_codec.h): Highway kernels compiled for every target in HWY_TARGETS and
// picked at run time with HWY_DYNAMIC_DISPATCH.
//
// [Note: stochastic rounding bits] is in stochastic_rounding.h: the bits are shared with the
// fused optimizer kernels.
//
// Every kernel processes whole vectors, then finishes the remainder with a one-lane descriptor
// running the same Highway ops, so a tail element is computed exactly like a vector element.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "optimizers/state_codec.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "optimizers/int8_block-inl.h"
#include "optimizers/stochastic_rounding-inl.h"

#ifndef ZS_OPTIMIZERS_STATE_CODEC_CC_HELPERS_
#define ZS_OPTIMIZERS_STATE_CODEC_CC_HELPERS_

#include <cstdint>
#include <cstring>

#include "optimizers/optimizer_spec.h"
#include "optimizers/stochastic_rounding.h"

namespace zs::state_codec_internal {

using sr::MakeSrKey;
using sr::SrBits;
using sr::SrKey;

}  // namespace zs::state_codec_internal

#endif  // ZS_OPTIMIZERS_STATE_CODEC_CC_HELPERS_

HWY_BEFORE_NAMESPACE();
namespace zs::state_codec_internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- bf16 -------------------------------------------------------------------------------------

// Decodes `count` elements (a multiple of Lanes(df)); returns the number done.
template <class DF>
HWY_INLINE size_t DecodeBF16Lanes(DF df, const uint16_t* in, size_t count, float* dst) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> du16;
  const size_t lanes = hn::Lanes(df);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    const auto bits = hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(du16, in + i)));
    hn::StoreU(hn::BitCast(df, bits), df, dst + i);
  }
  return i;
}

void DecodeBF16(const uint16_t* in, size_t n, float* dst) {
  const size_t done = DecodeBF16Lanes(hn::ScalableTag<float>(), in, n, dst);
  DecodeBF16Lanes(hn::CappedTag<float, 1>(), in + done, n - done, dst + done);
}

// Encodes src[i] for shard indices whose low 32 bits are index_lo + i (no wrap inside one call
// of this function; the caller splits at 2^32 boundaries). Returns the number done.
template <class DF>
HWY_INLINE size_t EncodeBF16Lanes(DF df, const float* src, size_t count, uint16_t* out,
                                  uint32_t index_lo, SrKey key, int state_index) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> du16;
  const size_t lanes = hn::Lanes(df);
  const auto iota = hn::Iota(du, 0);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    const auto u = hn::BitCast(du, hn::LoadU(df, src + i));
    const auto idx = hn::Add(iota, hn::Set(du, static_cast<uint32_t>(index_lo + i)));
    namespace srv = sr::HWY_NAMESPACE;
    const auto r = srv::SrBitsV(du, srv::SrHashV(du, idx, key), state_index);
    const auto bits = srv::RoundToBF16Bits(du, u, r);
    // Every lane is <= 0xffff, so the saturating demotion is a plain truncation.
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, bits)), du16, out + i);
  }
  return i;
}

void EncodeBF16(const float* src, size_t n, uint16_t* out, uint32_t index_lo, SrKey key,
                int state_index) {
  const size_t done =
      EncodeBF16Lanes(hn::ScalableTag<float>(), src, n, out, index_lo, key, state_index);
  EncodeBF16Lanes(hn::CappedTag<float, 1>(), src + done, n - done, out + done,
                  static_cast<uint32_t>(index_lo + done), key, state_index);
}

// ---- int8 -------------------------------------------------------------------------------------

template <class DF>
HWY_INLINE size_t DecodeInt8Lanes(DF df, const int8_t* in, size_t count, float scale, float* dst) {
  const size_t lanes = hn::Lanes(df);
  const auto vscale = hn::Set(df, scale);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    hn::StoreU(int8q::HWY_NAMESPACE::DecodeInt8V(df, in + i, vscale), df, dst + i);
  }
  return i;
}

// `n` elements starting at a block boundary; scales[b] belongs to the b-th block of the range.
void DecodeInt8(const int8_t* in, const float* scales, size_t n, float* dst) {
  for (size_t begin = 0; begin < n; begin += kQuantBlock) {
    const size_t count = n - begin < size_t{kQuantBlock} ? n - begin : size_t{kQuantBlock};
    const float scale = scales[begin / kQuantBlock];
    const size_t done =
        DecodeInt8Lanes(hn::ScalableTag<float>(), in + begin, count, scale, dst + begin);
    DecodeInt8Lanes(hn::CappedTag<float, 1>(), in + begin + done, count - done, scale,
                    dst + begin + done);
  }
}

// The block encoder is int8_block-inl.h's, shared with the fused kernel.
void EncodeInt8(const float* src, size_t n, int8_t* out, float* scales) {
  for (size_t begin = 0; begin < n; begin += kQuantBlock) {
    const size_t count = n - begin < size_t{kQuantBlock} ? n - begin : size_t{kQuantBlock};
    int8q::HWY_NAMESPACE::EncodeInt8Block(src + begin, count, out + begin,
                                          scales + begin / kQuantBlock);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace zs::state_codec_internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "optimizers/state_codec.h"
#include "runtime/base/check.h"

namespace zs {
namespace state_codec_internal {

HWY_EXPORT(DecodeBF16);
HWY_EXPORT(EncodeBF16);
HWY_EXPORT(DecodeInt8);
HWY_EXPORT(EncodeInt8);

void CheckRange(StateDType type, int64_t offset, int64_t n) {
  ZS_CHECK(offset >= 0 && n >= 0, "state codec: offset {} and n {} must be >= 0", offset, n);
  if (type == StateDType::kInt8) {
    ZS_CHECK(offset % kQuantBlock == 0,
             "state codec: int8 offset {} is not a multiple of the block size {}", offset,
             kQuantBlock);
  }
}

}  // namespace state_codec_internal

void DecodeState(StateDType type, const void* codes, const float* scales, int64_t offset, int64_t n,
                 float* dst) {
  using namespace state_codec_internal;
  CheckRange(type, offset, n);
  if (n == 0) return;
  ZS_CHECK(codes != nullptr && dst != nullptr, "DecodeState: null codes or dst for n {}", n);
  switch (type) {
    case StateDType::kF32:
      if (codes != dst) std::memmove(dst, codes, static_cast<size_t>(n) * sizeof(float));
      return;
    case StateDType::kBF16:
      HWY_DYNAMIC_DISPATCH(DecodeBF16)
      (static_cast<const uint16_t*>(codes), static_cast<size_t>(n), dst);
      return;
    case StateDType::kInt8:
      ZS_CHECK(scales != nullptr, "DecodeState: int8 state without scales (offset {}, n {})",
               offset, n);
      HWY_DYNAMIC_DISPATCH(DecodeInt8)
      (static_cast<const int8_t*>(codes), scales, static_cast<size_t>(n), dst);
      return;
  }
  ZS_CHECK(false, "DecodeState: unknown StateDType {}", static_cast<int>(type));
}

void EncodeState(StateDType type, const float* src, int64_t offset, int64_t n, void* codes,
                 float* scales, uint64_t seed, int64_t step, int state_index) {
  using namespace state_codec_internal;
  CheckRange(type, offset, n);
  if (n == 0) return;
  ZS_CHECK(src != nullptr && codes != nullptr, "EncodeState: null src or codes for n {}", n);
  switch (type) {
    case StateDType::kF32:
      if (codes != src) std::memmove(codes, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case StateDType::kBF16: {
      ZS_CHECK(state_index == 0 || state_index == 1, "EncodeState: state_index {} (0 or 1)",
               state_index);
      // One key per run of indices sharing their high 32 bits ([Note: stochastic rounding bits]).
      auto* out = static_cast<uint16_t*>(codes);
      for (int64_t i = 0; i < n;) {
        const uint64_t index = static_cast<uint64_t>(offset + i);
        const uint64_t to_boundary = (uint64_t{1} << 32) - (index & 0xffffffffu);
        const int64_t count =
            static_cast<int64_t>(to_boundary) < n - i ? static_cast<int64_t>(to_boundary) : n - i;
        const SrKey key = MakeSrKey(seed, step, static_cast<uint32_t>(index >> 32));
        HWY_DYNAMIC_DISPATCH(EncodeBF16)
        (src + i, static_cast<size_t>(count), out + i, static_cast<uint32_t>(index), key,
         state_index);
        i += count;
      }
      return;
    }
    case StateDType::kInt8:
      ZS_CHECK(scales != nullptr, "EncodeState: int8 state without scales (offset {}, n {})",
               offset, n);
      HWY_DYNAMIC_DISPATCH(EncodeInt8)
      (src, static_cast<size_t>(n), static_cast<int8_t*>(codes), scales);
      return;
  }
  ZS_CHECK(false, "EncodeState: unknown StateDType {}", static_cast<int>(type));
}

uint32_t StochasticRoundingBits(uint64_t seed, int64_t step, int state_index, int64_t index) {
  using namespace state_codec_internal;
  const uint64_t u = static_cast<uint64_t>(index);
  return SrBits(MakeSrKey(seed, step, static_cast<uint32_t>(u >> 32)), state_index,
                static_cast<uint32_t>(u));
}

}  // namespace zs

#endif  // HWY_ONCE
