// State codecs: reduced-precision optimizer states decoded to fp32 for a tile of work and
// encoded back after the update (optimizer_spec.h, [Note: state layout]).
//
// Contract
// - DecodeState converts n elements of a state, starting at shard element `offset`, to fp32.
//   EncodeState converts n fp32 values back. Both are Highway-vectorized with runtime dispatch.
// - kF32: plain copies (the kernels normally skip the codec for fp32 states).
// - `codes`, `src` and `dst` point at element `offset` of their arrays (bf16 codes are uint16_t
//   bit patterns, int8 codes int8_t); `scales` is used by kInt8 only and may be null otherwise.
// - kBF16: encoding rounds stochastically: 16 random bits r from a counter-based hash of
//   (seed, step, offset + i), the high half for state_index 0 and the low half for 1
//   (StochasticRoundingBits; [Note: stochastic rounding bits]), are added to the fp32 bits,
//   which are then truncated to their high 16, so the value rounds away from zero with
//   probability (low 16 bits) / 2^16. The expected value of the stored number is the fp32 value
//   (small updates are not lost the way round-to-nearest loses them), bf16-exact values stay
//   exact, and the result is the same whatever the tiling. Non-finite values are kept (NaN
//   stays NaN, made quiet; inf stays inf); a finite value above the largest bf16 rounds to inf
//   with the probability stochastic rounding gives it.
// - kInt8: blocks of kQuantBlock elements; block b = shard elements [b*kQuantBlock, ...).
//   `offset` must be a multiple of kQuantBlock (ZS_CHECK) and n must cover whole blocks except
//   for the shard's last block (a call whose n is not a multiple of kQuantBlock ends the shard).
//   Encoding computes scale = max|x| / 127 per block (0 for an all-zero block, and for a block
//   so small that the division underflows: its codes are then 0) and code =
//   round-to-nearest-even(x * inv) clamped to [-127, 127], where inv = 127 / max|x| is computed
//   once per block (x / scale instead when inv or max|x| is not finite) ([Note: int8
//   quantization]); decoding is code * scale. `scales` points at the scale of block offset /
//   kQuantBlock. A block holding inf or NaN gets a non-finite scale and codes
//   that decode to no useful value (no undefined behaviour), the same on every split and path
//   (the block max is taken on the integer bits of |x|, where NaN orders above inf).
// - Pure functions of their arguments; thread-safe; no allocation. kF32 allows codes == src
//   (dst == codes); the other types need non-overlapping arrays.
#pragma once

#include <cstdint>

#include "optimizers/optimizer_spec.h"

namespace zs {

void DecodeState(StateDType type, const void* codes, const float* scales, int64_t offset, int64_t n,
                 float* dst);

void EncodeState(StateDType type, const float* src, int64_t offset, int64_t n, void* codes,
                 float* scales, uint64_t seed, int64_t step, int state_index);

// The random 16 bits used for element `index` of state `state_index` (0 or 1), exposed for
// tests and the CUDA kernels.
uint32_t StochasticRoundingBits(uint64_t seed, int64_t step, int state_index, int64_t index);

}  // namespace zs
