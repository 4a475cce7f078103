// Gradient squared norm on the GPU (CUB DeviceReduce), the global-norm step of gradient
// clipping. CPU reference: kernels/cpu_reference.h (bit-identical).
//
// Contract
// - Leaves: device pointers, counts, a caller-owned device workspace and a stream; no
//   runtime headers, no allocation.
// - The result is the sum of x[i]^2 computed exactly in a 128-bit fixed-point frame and
//   rounded once to double (see [Note: exact squared norm] in kernels/float_bits.h): it does
//   not depend on the order of elements, the grid, the GPU or the CPU, so ranks summing their
//   shards' norms get the same bits as an unsharded run. NaN if any element is NaN, else +inf
//   if any is infinite; 0 for n == 0.
// - GradSquaredNormWorkspaceBytes asks CUB how much scratch a launch of n elements needs; it
//   touches the device (it returns the CUDA error when there is none). The workspace must stay
//   untouched until the stream passes the launch.
// - Launch* enqueues two CUB reductions (max |x|, then the sum) and two one-thread kernels on
// `stream`, writes the
//   result to *out (device memory) and returns at once with the launch error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace zs::kernels {

cudaError_t GradSquaredNormWorkspaceBytes(size_t n, size_t* bytes);

cudaError_t LaunchGradSquaredNormF32(const float* x, size_t n, double* out, void* workspace,
                                     size_t workspace_bytes, cudaStream_t stream);
cudaError_t LaunchGradSquaredNormBF16(const uint16_t* x, size_t n, double* out, void* workspace,
                                      size_t workspace_bytes, cudaStream_t stream);
cudaError_t LaunchGradSquaredNormF16(const uint16_t* x, size_t n, double* out, void* workspace,
                                     size_t workspace_bytes, cudaStream_t stream);

}  // namespace zs::kernels
