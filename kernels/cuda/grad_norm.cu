// The only CUB translation unit of kernels/ (CUB templates take ~13 s to compile: keep them
// here). See [Note: exact squared norm] in kernels/float_bits.h for the arithmetic.
#include <cmath>
#include <cub/device/device_reduce.cuh>
#include <limits>

#include "kernels/cuda/grad_norm.h"
#include "kernels/float_bits.h"

namespace zs::kernels {
namespace {

// Workspace layout: a small header of per-launch values, then CUB's temporary storage.
struct Header {
  U128 sum;
  uint32_t max_abs_bits;
  int scale;  // g
};
constexpr size_t kHeaderBytes = 256;  // keeps CUB's storage 256-byte aligned

template <typename E>
struct AbsBitsOp {
  __device__ uint32_t operator()(typename E::T v) const {
    return FloatToBits(E::Load(v)) & 0x7fffffffu;
  }
};

struct MaxOp {
  __device__ uint32_t operator()(uint32_t a, uint32_t b) const { return a > b ? a : b; }
};

template <typename E>
struct SquareTermOp {
  const Header* header;
  __device__ U128 operator()(typename E::T v) const {
    if (header->max_abs_bits >= 0x7f800000u) return U128{};  // the result is NaN or inf anyway
    return SquareTerm(E::Load(v), header->scale);
  }
};

struct AddOp {
  __device__ U128 operator()(U128 a, U128 b) const { return AddU128(a, b); }
};

__global__ void ComputeScaleKernel(Header* header, uint64_t n) {
  header->scale = SquareSumScale(header->max_abs_bits, n);
}

__global__ void FinishKernel(const Header* header, double* out) {
  const uint32_t m = header->max_abs_bits;
  if (m > 0x7f800000u) {
    *out = __longlong_as_double(0x7ff8000000000000ll);  // NaN
  } else if (m == 0x7f800000u) {
    *out = __longlong_as_double(0x7ff0000000000000ll);  // +inf
  } else {
    *out = U128ScaledToDouble(header->sum, header->scale);
  }
}

// The CUB scratch size of both passes for element type E (a null-storage query).
template <typename E>
cudaError_t CubBytes(size_t n, size_t* bytes) {
  const typename E::T* x = nullptr;
  size_t max_bytes = 0, sum_bytes = 0;
  cudaError_t err = cub::DeviceReduce::TransformReduce(
      nullptr, max_bytes, x, (uint32_t*)nullptr, int64_t(n), MaxOp{}, AbsBitsOp<E>{}, uint32_t{0});
  if (err != cudaSuccess) return err;
  err = cub::DeviceReduce::TransformReduce(nullptr, sum_bytes, x, (U128*)nullptr, int64_t(n),
                                           AddOp{}, SquareTermOp<E>{nullptr}, U128{});
  *bytes = max_bytes > sum_bytes ? max_bytes : sum_bytes;
  return err;
}

template <typename E>
cudaError_t Launch(const typename E::T* x, size_t n, double* out, void* workspace,
                   size_t workspace_bytes, cudaStream_t stream) {
  if (n == 0) return cudaMemsetAsync(out, 0, sizeof(double), stream);  // +0.0
  size_t cub_bytes = 0;
  cudaError_t err = CubBytes<E>(n, &cub_bytes);
  if (err != cudaSuccess) return err;
  if (workspace == nullptr || workspace_bytes < kHeaderBytes + cub_bytes) {
    return cudaErrorInvalidValue;
  }
  auto* header = static_cast<Header*>(workspace);
  void* cub_storage = static_cast<char*>(workspace) + kHeaderBytes;
  err =
      cub::DeviceReduce::TransformReduce(cub_storage, cub_bytes, x, &header->max_abs_bits,
                                         int64_t(n), MaxOp{}, AbsBitsOp<E>{}, uint32_t{0}, stream);
  if (err != cudaSuccess) return err;
  ComputeScaleKernel<<<1, 1, 0, stream>>>(header, uint64_t(n));
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  err = cub::DeviceReduce::TransformReduce(cub_storage, cub_bytes, x, &header->sum, int64_t(n),
                                           AddOp{}, SquareTermOp<E>{header}, U128{}, stream);
  if (err != cudaSuccess) return err;
  FinishKernel<<<1, 1, 0, stream>>>(header, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t GradSquaredNormWorkspaceBytes(size_t n, size_t* bytes) {
  size_t f32_bytes = 0, half_bytes = 0;  // bf16 and f16 share a storage type, hence a size
  cudaError_t err = CubBytes<F32Element>(n, &f32_bytes);
  if (err == cudaSuccess) err = CubBytes<BF16Element>(n, &half_bytes);
  if (err != cudaSuccess) return err;
  *bytes = kHeaderBytes + (f32_bytes > half_bytes ? f32_bytes : half_bytes);
  return cudaSuccess;
}

cudaError_t LaunchGradSquaredNormF32(const float* x, size_t n, double* out, void* workspace,
                                     size_t workspace_bytes, cudaStream_t stream) {
  return Launch<F32Element>(x, n, out, workspace, workspace_bytes, stream);
}
cudaError_t LaunchGradSquaredNormBF16(const uint16_t* x, size_t n, double* out, void* workspace,
                                      size_t workspace_bytes, cudaStream_t stream) {
  return Launch<BF16Element>(x, n, out, workspace, workspace_bytes, stream);
}
cudaError_t LaunchGradSquaredNormF16(const uint16_t* x, size_t n, double* out, void* workspace,
                                     size_t workspace_bytes, cudaStream_t stream) {
  return Launch<F16Element>(x, n, out, workspace, workspace_bytes, stream);
}

}  // namespace zs::kernels
