// Stochastic rounding of fp32 to bf16: the random bits, shared by the state codecs
// (state_codec.cc) and the fused optimizer kernels (optimizer_kernels.cc), so both round a state
// element the same way.
//
// [Note: stochastic rounding bits] The random 16 bits for state `state_index` of shard element
// `index` are half of one 32-bit hash of the element:
//   key    = splitmix64 chain over (index >> 32), step and seed                 (64 bits: k1, k2)
//   h      = fmix32(uint32(index) ^ k1) ^ k2                                   (murmur3 fmix32)
//   bits   = state_index == 0 ? h >> 16 : h & 0xffff
// One hash serves both states of an element (Adam's m and v), which halves the hashing in the
// fused kernels; fmix32's final xor-shift leaves both halves uniform and independent enough for
// rounding (state_codec_test checks their means, bits and correlation). One fmix32 is enough:
// it is a bijection with full avalanche, k1 (new each step) makes an element's inputs over the
// steps pseudo-random, and consecutive indices within a step avalanche to unrelated outputs.
// (A second fmix32 round cost a fifth of the bf16-state step's time for nothing measurable.) The
// key is constant over any run of indices that share their high 32 bits, so kernels compute it once
// per such run in scalar code and the per-element part in 32-bit lanes (stochastic_rounding-inl.h).
// The bf16 value is then the high half of (bits(x) + r): truncation after adding random low bits,
// so its expectation is x.
//
// [Note: hashing within a 64K block] Two identities give the fused kernel fmix32's bits for less:
// - fmix32 opens with h ^= h >> 16, and for h = index ^ k1 the high half (index >> 16) ^
//   (k1 >> 16) is the same for every index of one aligned block of 2^16. Within a block the
//   first two operations fold into one xor with the block key bk = SrBlockKey(key, index >> 16):
//     SrHash(key, index) = Fmix32AfterMul((index ^ bk) * C1) ^ k2.
// - For index = base + lane with base a multiple of a power of two W > lane, the bits of base
//   and lane do not overlap, so index ^ bk = (base ^ (bk & -W)) + (lane ^ (bk & (W - 1))), and
//   fmix32's first multiplication distributes over that sum (mod 2^32):
//     (index ^ bk) * C1 = (base ^ (bk & -W)) * C1 + (lane ^ (bk & (W - 1))) * C1.
//   The second product depends only on the lane and the block: the kernel computes it once per
//   block, and per step of W = 2 vectors one scalar product, broadcast and added (SrHashSplit).
//   That replaces an xor and a vector multiply per vector, and the xor-shift of the first point.
// The kernel starts its whole steps at indices that are multiples of W, so none straddles a
// block, and runs the elements before the first one, like the codecs, through the whole fmix32.
#pragma once

#include <cstdint>

#include "runtime/base/splitmix64.h"
namespace zs::sr {

using ::zs::SplitMix64;

inline constexpr uint32_t kFmix32C1 = 0x85ebca6bu;
inline constexpr uint32_t kFmix32C2 = 0xc2b2ae35u;

// fmix32 after its first multiplication.
inline constexpr uint32_t Fmix32AfterMul(uint32_t h) {
  h ^= h >> 13;
  h *= kFmix32C2;
  h ^= h >> 16;
  return h;
}

inline constexpr uint32_t Fmix32(uint32_t h) { return Fmix32AfterMul((h ^ (h >> 16)) * kFmix32C1); }

struct SrKey {
  uint32_t k1 = 0;
  uint32_t k2 = 0;
};

// The key of the run of indices whose high 32 bits are `index_hi`.
inline constexpr SrKey MakeSrKey(uint64_t seed, int64_t step, uint32_t index_hi) {
  uint64_t h = SplitMix64(uint64_t{index_hi} << 32);
  h = SplitMix64(h ^ static_cast<uint64_t>(step));
  h = SplitMix64(h ^ seed);
  return SrKey{static_cast<uint32_t>(h), static_cast<uint32_t>(h >> 32)};
}

inline constexpr uint32_t SrHash(SrKey key, uint32_t index_lo) {
  return Fmix32(index_lo ^ key.k1) ^ key.k2;
}

// The key of the aligned block of 2^16 indices whose high 16 bits are `index_hi16` (< 2^16):
// [Note: hashing within a 64K block].
inline constexpr uint32_t SrBlockKey(SrKey key, uint32_t index_hi16) {
  return key.k1 ^ (key.k1 >> 16) ^ index_hi16;
}

// SrHash of index_lo = base + lane in the block whose key is `block_key`, where base is a
// multiple of the power of two `width` > lane: the fused kernel's form of it.
inline constexpr uint32_t SrHashSplit(uint32_t block_key, SrKey key, uint32_t base, uint32_t lane,
                                      uint32_t width) {
  const uint32_t base_product = (base ^ (block_key & ~(width - 1))) * kFmix32C1;
  const uint32_t lane_product = (lane ^ (block_key & (width - 1))) * kFmix32C1;
  return Fmix32AfterMul(base_product + lane_product) ^ key.k2;
}

inline constexpr uint32_t SrBits(SrKey key, int state_index, uint32_t index_lo) {
  const uint32_t h = SrHash(key, index_lo);
  return state_index == 0 ? h >> 16 : h & 0xffffu;
}

}  // namespace zs::sr
