// The scalar pieces of stochastic rounding to bf16, shared by the CPU kernels and codecs
// (optimizers/stochastic_rounding.h holds the design: [Note: stochastic rounding bits]) and the
// CUDA fused optimizer kernel, so a state element rounds the same way on either.
//
// Contract
// - Pure functions, `__host__ __device__` under nvcc (ZS_KERNEL_HD); integer and constexpr but
//   StochasticRoundToBF16Bits (a float's bits). MakeSrKey is host-side (SplitMix64, once per
//   run of 2^32 indices). Thread-safe, no state.
// - The random 16 bits of state `state_index` of shard element `index` are half of
//   SrHash(MakeSrKey(seed, step, index >> 32), uint32(index)): the high half for state 0, the
//   low half for state 1.
#pragma once

#include <cstdint>

#include "kernels/float_bits.h"
#include "runtime/base/splitmix64.h"  // a constexpr function, no dependencies

namespace zs::sr {

inline constexpr uint32_t kFmix32C1 = 0x85ebca6bu;
inline constexpr uint32_t kFmix32C2 = 0xc2b2ae35u;

// fmix32 after its first multiplication.
ZS_KERNEL_HD constexpr uint32_t Fmix32AfterMul(uint32_t h) {
  h ^= h >> 13;
  h *= kFmix32C2;
  h ^= h >> 16;
  return h;
}

ZS_KERNEL_HD constexpr uint32_t Fmix32(uint32_t h) {
  return Fmix32AfterMul((h ^ (h >> 16)) * kFmix32C1);
}

struct SrKey {
  uint32_t k1 = 0;
  uint32_t k2 = 0;
};

// The key of the run of indices whose high 32 bits are `index_hi`.
inline constexpr SrKey MakeSrKey(uint64_t seed, int64_t step, uint32_t index_hi) {
  uint64_t h = ::zs::SplitMix64(uint64_t{index_hi} << 32);
  h = ::zs::SplitMix64(h ^ static_cast<uint64_t>(step));
  h = ::zs::SplitMix64(h ^ seed);
  return SrKey{static_cast<uint32_t>(h), static_cast<uint32_t>(h >> 32)};
}

ZS_KERNEL_HD constexpr uint32_t SrHash(SrKey key, uint32_t index_lo) {
  return Fmix32(index_lo ^ key.k1) ^ key.k2;
}

// The key of the aligned block of 2^16 indices whose high 16 bits are `index_hi16` (< 2^16):
// [Note: hashing within a 64K block].
ZS_KERNEL_HD constexpr uint32_t SrBlockKey(SrKey key, uint32_t index_hi16) {
  return key.k1 ^ (key.k1 >> 16) ^ index_hi16;
}

// SrHash of index_lo = base + lane in the block whose key is `block_key`, where base is a
// multiple of the power of two `width` > lane: the fused CPU kernel's form of it.
ZS_KERNEL_HD constexpr uint32_t SrHashSplit(uint32_t block_key, SrKey key, uint32_t base,
                                            uint32_t lane, uint32_t width) {
  const uint32_t base_product = (base ^ (block_key & ~(width - 1))) * kFmix32C1;
  const uint32_t lane_product = (lane ^ (block_key & (width - 1))) * kFmix32C1;
  return Fmix32AfterMul(base_product + lane_product) ^ key.k2;
}

// State `state_index`'s 16 random bits from an element's hash.
ZS_KERNEL_HD constexpr uint32_t SrBitsOfHash(uint32_t hash, int state_index) {
  return state_index == 0 ? hash >> 16 : hash & 0xffffu;
}

ZS_KERNEL_HD constexpr uint32_t SrBits(SrKey key, int state_index, uint32_t index_lo) {
  return SrBitsOfHash(SrHash(key, index_lo), state_index);
}

// Stochastic rounding of x to bf16 with the random bits r (< 2^16): the high half of
// bits(x) + r. Finite values cannot carry into the sign bit (at worst they round to inf), inf
// keeps its bits, and NaN gets the quiet bit instead of r, so it stays NaN. The vector form is
// RoundToBF16Upper (optimizers/stochastic_rounding-inl.h).
ZS_KERNEL_HD uint16_t StochasticRoundToBF16Bits(float x, uint32_t r) {
  const uint32_t u = ::zs::kernels::FloatToBits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u | 0x00400000u) >> 16);
  return uint16_t((u + r) >> 16);
}

}  // namespace zs::sr
