// State codecs: reduced-precision optimizer states decoded to fp32 for a tile of work and
// encoded back after the update (optimizer_spec.h, [Note: state layout]).
//
// Contract
// - DecodeState converts n elements of a state, starting at shard element `offset`, to fp32.
//   EncodeState converts n fp32 values back. Both are Highway-vectorized with runtime dispatch.
// - kF32: plain copies (the kernels normally skip the codec for fp32 states).
// - kBF16: encoding rounds stochastically: the fp32 value's 16 low bits are compared with 16
//   random bits from a counter-based hash of (seed, step, state_index, offset + i), so the
//   expected value of the stored number is the fp32 value (small updates are not lost the way
//   round-to-nearest loses them), and the result is the same whatever the tiling. Non-finite
//   values are kept (NaN stays NaN, inf stays inf).
// - kInt8: blocks of kQuantBlock elements; block b = shard elements [b*kQuantBlock, ...).
//   `offset` must be a multiple of kQuantBlock and n must cover whole blocks except for the
//   shard's last block (ZS_CHECK). Encoding computes scale = max|x| / 127 per block (0 for an
//   all-zero block) and code = round-to-nearest-even(x / scale) clamped to [-127, 127];
//   decoding is code * scale. `scales` points at the scale of block offset / kQuantBlock.
// - Pure functions of their arguments; thread-safe; no allocation.
#pragma once

#include <cstdint>

#include "optimizers/optimizer_spec.h"

namespace zs {

void DecodeState(StateDType type, const void* codes, const float* scales, int64_t offset,
                 int64_t n, float* dst);

void EncodeState(StateDType type, const float* src, int64_t offset, int64_t n, void* codes,
                 float* scales, uint64_t seed, int64_t step, int state_index);

// The random 16 bits used for element `index` (exposed for tests and the CUDA kernels).
uint32_t StochasticRoundingBits(uint64_t seed, int64_t step, int state_index, int64_t index);

}  // namespace zs
