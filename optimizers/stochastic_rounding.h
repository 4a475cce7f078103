// Stochastic rounding of fp32 to bf16: the random bits, shared by the state codecs
// (state_codec.cc), the fused CPU optimizer kernels (optimizer_kernels.cc) and the CUDA fused
// optimizer (through kernels/stochastic_rounding_bits.h), so all round a state element the same
// way.
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

// The scalar functions (Fmix32, SrKey, MakeSrKey, SrHash, SrBlockKey, SrHashSplit, SrBits,
// StochasticRoundToBF16Bits) live with the CUDA kernels, which round the same way.
#include "kernels/stochastic_rounding_bits.h"
