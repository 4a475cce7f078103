// CPU references of the CUDA kernels in kernels/cuda/: the same element-wise arithmetic on host
// memory, so tests compare the kernels with them bit for bit (llm.c style: every kernel has a
// reference beside it).
//
// Contract
// - Leaves: raw pointers and counts, no runtime headers, no allocation, no threads. bf16 and
//   f16 values are their 16-bit patterns (uint16_t). `in` and `out` may be the same buffer.
// - Casts round to nearest, ties to even, exactly as runtime/base/dtype.h (float_bits.h).
// - ScaleAndCheck*: out[i] = round(in[i] * scale) computed in f32 and rounded once to the
//   element type; returns true if any input or any stored output is an infinity or a NaN.
// - GradSquaredNorm*: the sum of squares, independent of the order of the elements (see
//   [Note: exact squared norm] in float_bits.h); NaN if any element is NaN, else +inf if any is
//   infinite; 0 for n == 0.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zs::kernels {

void CastF32ToBF16Reference(const float* in, uint16_t* out, size_t n);
void CastBF16ToF32Reference(const uint16_t* in, float* out, size_t n);
void CastF32ToF16Reference(const float* in, uint16_t* out, size_t n);
void CastF16ToF32Reference(const uint16_t* in, float* out, size_t n);

bool ScaleAndCheckF32Reference(const float* in, float* out, size_t n, float scale);
bool ScaleAndCheckBF16Reference(const uint16_t* in, uint16_t* out, size_t n, float scale);
bool ScaleAndCheckF16Reference(const uint16_t* in, uint16_t* out, size_t n, float scale);

double GradSquaredNormF32Reference(const float* x, size_t n);
double GradSquaredNormBF16Reference(const uint16_t* x, size_t n);
double GradSquaredNormF16Reference(const uint16_t* x, size_t n);

}  // namespace zs::kernels
