#include <algorithm>

#include "kernels/cuda/convert.h"
#include "kernels/float_bits.h"

namespace zs::kernels {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops: enough blocks to fill an H100/H200 several times over; more only adds
// launch overhead.
constexpr size_t kMaxBlocks = 4096;

unsigned BlocksFor(size_t n) {
  return unsigned(std::min(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

template <typename From, typename To>
__global__ void CastKernel(const typename From::T* in, typename To::T* out, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    out[i] = To::Store(From::Load(in[i]));
  }
}

template <typename E>
__global__ void ScaleAndCheckKernel(const typename E::T* in, typename E::T* out, size_t n,
                                    float scale, int* found_nonfinite) {
  bool found = false;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float v = E::Load(in[i]);
    const typename E::T stored = E::Store(__fmul_rn(v, scale));  // never fused into an FMA
    found |= !IsFiniteBits(FloatToBits(v)) || !IsFiniteBits(FloatToBits(E::Load(stored)));
    out[i] = stored;
  }
  // Every writer stores the same value, so plain stores race benignly; one per thread at most.
  if (found) *found_nonfinite = 1;
}

template <typename From, typename To>
cudaError_t LaunchCast(const typename From::T* in, typename To::T* out, size_t n,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  CastKernel<From, To><<<BlocksFor(n), kThreads, 0, stream>>>(in, out, n);
  return cudaGetLastError();
}

template <typename E>
cudaError_t LaunchScaleAndCheck(const typename E::T* in, typename E::T* out, size_t n, float scale,
                                int* found_nonfinite, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ScaleAndCheckKernel<E><<<BlocksFor(n), kThreads, 0, stream>>>(in, out, n, scale, found_nonfinite);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchCastF32ToBF16(const float* in, uint16_t* out, size_t n, cudaStream_t stream) {
  return LaunchCast<F32Element, BF16Element>(in, out, n, stream);
}
cudaError_t LaunchCastBF16ToF32(const uint16_t* in, float* out, size_t n, cudaStream_t stream) {
  return LaunchCast<BF16Element, F32Element>(in, out, n, stream);
}
cudaError_t LaunchCastF32ToF16(const float* in, uint16_t* out, size_t n, cudaStream_t stream) {
  return LaunchCast<F32Element, F16Element>(in, out, n, stream);
}
cudaError_t LaunchCastF16ToF32(const uint16_t* in, float* out, size_t n, cudaStream_t stream) {
  return LaunchCast<F16Element, F32Element>(in, out, n, stream);
}

cudaError_t LaunchScaleAndCheckF32(const float* in, float* out, size_t n, float scale,
                                   int* found_nonfinite, cudaStream_t stream) {
  return LaunchScaleAndCheck<F32Element>(in, out, n, scale, found_nonfinite, stream);
}
cudaError_t LaunchScaleAndCheckBF16(const uint16_t* in, uint16_t* out, size_t n, float scale,
                                    int* found_nonfinite, cudaStream_t stream) {
  return LaunchScaleAndCheck<BF16Element>(in, out, n, scale, found_nonfinite, stream);
}
cudaError_t LaunchScaleAndCheckF16(const uint16_t* in, uint16_t* out, size_t n, float scale,
                                   int* found_nonfinite, cudaStream_t stream) {
  return LaunchScaleAndCheck<F16Element>(in, out, n, scale, found_nonfinite, stream);
}

}  // namespace zs::kernels
