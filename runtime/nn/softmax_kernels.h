// Vectorized row kernels of a softmax: the max of a row, exp(x - shift) with its sum, and a
// scale. The cross-entropies (cross_entropy.h, parallel/tensor/vocab_parallel_cross_entropy.h)
// and causal attention (causal_attention.h, each score row's causal prefix) run them; over rows
// of logits as wide as the vocabulary, a scalar std::exp per element
// was the forward's largest cost after the vocabulary matmul ([Note: phase split] in
// bench/bench_parallel.cc: it made the head's forward about 1.8 blocks' forwards).
//
// Contract
// - Plain functions on caller-owned memory; no allocation, no state; any thread.
// - Highway compiles them once per SIMD target and the best target of this CPU runs
//   (SoftmaxKernelTarget() names it). Exp is Highway's (1 ULP against std::exp), so results
//   differ from a scalar std::exp loop in the last bit, and the sum's order is the target's
//   lane order: the same bits on every call on one machine, whatever the row's alignment or
//   length (a partial last vector goes through the same vector code, [Note: identical tails] in
//   optimizers/optimizer_kernels.cc), but not across machines with different targets.
// - ExpShifted sums in float within blocks of 1024 elements and adds the blocks in double: an
//   error of a few float ulps per block whatever the row length.
#pragma once

#include <cstdint>

namespace zs::nn {

// The largest of x[0, n); -infinity for n == 0.
float RowMax(const float* x, int64_t n);
// out[j] = exp(x[j] - shift) for j in [0, n) (out may alias x); returns the sum of out.
double ExpShifted(const float* x, int64_t n, float shift, float* out);
// x[j] *= s for j in [0, n).
void ScaleRow(float* x, int64_t n, float s);
// The SIMD target the kernels run on here, e.g. "AVX3".
const char* SoftmaxKernelTarget();

}  // namespace zs::nn
