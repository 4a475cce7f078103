// Element-wise CUDA kernels: f32 <-> bf16 / f16 casts and the loss-scale step's
// scale-and-check-overflow. CPU references: kernels/cpu_reference.h (bit-identical).
//
// Contract
// - Leaves: device pointers, element counts and a stream; no runtime headers. bf16/f16 values
//   are 16-bit patterns (uint16_t). `in` may equal `out` (in place); other overlaps are bugs.
// - Each Launch* only enqueues work on `stream` and returns at once; it blocks neither the
//   host nor other streams. The return value is the launch error (cudaSuccess when n == 0,
//   where nothing is launched). Errors of the kernel itself show up at the next
//   synchronisation, as usual in CUDA.
// - Casts round to nearest, ties to even (see kernels/float_bits.h).
// - LaunchScaleAndCheck*: out[i] = in[i] * scale (in f32, rounded once to the element type);
//   if any input or any stored output is an infinity or a NaN, *found_nonfinite (device
//   memory) is set to 1. It is never cleared: the caller zeroes it once before a batch of
//   launches and reads it after them (PyTorch's found_inf).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace zs::kernels {

cudaError_t LaunchCastF32ToBF16(const float* in, uint16_t* out, size_t n, cudaStream_t stream);
cudaError_t LaunchCastBF16ToF32(const uint16_t* in, float* out, size_t n, cudaStream_t stream);
cudaError_t LaunchCastF32ToF16(const float* in, uint16_t* out, size_t n, cudaStream_t stream);
cudaError_t LaunchCastF16ToF32(const uint16_t* in, float* out, size_t n, cudaStream_t stream);

cudaError_t LaunchScaleAndCheckF32(const float* in, float* out, size_t n, float scale,
                                   int* found_nonfinite, cudaStream_t stream);
cudaError_t LaunchScaleAndCheckBF16(const uint16_t* in, uint16_t* out, size_t n, float scale,
                                    int* found_nonfinite, cudaStream_t stream);
cudaError_t LaunchScaleAndCheckF16(const uint16_t* in, uint16_t* out, size_t n, float scale,
                                   int* found_nonfinite, cudaStream_t stream);

}  // namespace zs::kernels
