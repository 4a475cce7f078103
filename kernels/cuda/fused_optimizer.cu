// The fused multi-tensor optimizer kernel. See [Note: multi-tensor launch] in fused_optimizer.h
// for how a list becomes chunks, and optimizers/optimizer_spec.h for the update rules.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cuda/fused_optimizer.h"
#include "kernels/float_bits.h"

namespace zs::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kVec =
    8;  // elements per vector step: 2 x float4 for fp32, one 16-byte load for 16-bit
static_assert(kFusedOptimizerChunk % kVec == 0, "chunks must start on vector boundaries");

// One tensor of the list as the kernel sees it. Its elements [0, head) are done by the first
// chunk with scalar code; chunk k >= 0 then covers [head + k * C, head + (k + 1) * C) ∩ [0, n),
// vectorized when `vec` (every array used is 16-byte aligned at element `head`).
struct TensorDesc {
  float* master;
  float* state0;
  float* state1;
  const void* grad;
  void* param_out;
  uint64_t n;
  uint64_t first_chunk;  // index of this tensor's first chunk in the launch
  uint32_t head;         // < kVec, <= n
  uint32_t vec;          // 1: vector path
  float weight_decay;
};

struct InlineTable {
  TensorDesc tensors[kFusedOptimizerInlineTensors];
};

// Per-launch values, with what every element would otherwise recompute done once on the host.
struct Params {
  FusedOptimizerKind kind;
  bool nesterov;
  bool has_momentum;  // SGD: beta1 != 0 (optimizer_spec.h's NumStates)
  bool first_step;    // SGD: buf = g at step 1
  float lr;
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float eps;
  float grad_scale;
  float step_size;     // Adam: lr / (1 - beta1^step)
  float inv_sqrt_bc2;  // Adam: 1 / sqrt(1 - beta2^step)
  uint32_t num_tensors;
  uint64_t total_chunks;
};

// One element's update. g is the scaled gradient, w the master, s0/s1 the states (unused ones
// are ignored), decay = 1 - lr * wd.
template <FusedOptimizerKind K>
__device__ __forceinline__ void UpdateElement(const Params& p, float wd, float decay, float g,
                                              float& w, float& s0, float& s1) {
  if constexpr (K == FusedOptimizerKind::kAdamW || K == FusedOptimizerKind::kAdam) {
    if constexpr (K == FusedOptimizerKind::kAdamW) {
      w *= decay;
    } else {
      g += wd * w;
    }
    s0 = p.beta1 * s0 + p.one_minus_beta1 * g;
    s1 = p.beta2 * s1 + p.one_minus_beta2 * (g * g);
    w -= p.step_size * s0 / (sqrtf(s1) * p.inv_sqrt_bc2 + p.eps);
  } else if constexpr (K == FusedOptimizerKind::kSgd) {
    g += wd * w;
    if (!p.has_momentum) {
      w -= p.lr * g;
    } else {
      s0 = p.first_step ? g : p.beta1 * s0 + g;
      w -= p.lr * (p.nesterov ? g + p.beta1 * s0 : s0);
    }
  } else if constexpr (K == FusedOptimizerKind::kAdagrad) {
    g += wd * w;
    s0 += g * g;
    w -= p.lr * g / (sqrtf(s0) + p.eps);
  } else {  // Lion
    w *= decay;
    const float c = p.beta1 * s0 + p.one_minus_beta1 * g;
    const float sign = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : 0.0f);
    w -= p.lr * sign;
    s0 = p.beta2 * s0 + p.one_minus_beta2 * g;
  }
}

template <FusedOptimizerKind K>
inline constexpr bool kUsesState1 =
    K == FusedOptimizerKind::kAdamW || K == FusedOptimizerKind::kAdam;

__device__ __forceinline__ void Unpack16(uint4 v, uint16_t (&h)[kVec]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    h[2 * i] = uint16_t(words[i] & 0xffffu);
    h[2 * i + 1] = uint16_t(words[i] >> 16);
  }
}

__device__ __forceinline__ uint4 Pack16(const uint16_t (&h)[kVec]) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) words[i] = uint32_t(h[2 * i]) | (uint32_t(h[2 * i + 1]) << 16);
  return make_uint4(words[0], words[1], words[2], words[3]);
}

__device__ __forceinline__ void Load8(const float* src, float (&dst)[kVec]) {
  const float4 a = reinterpret_cast<const float4*>(src)[0];
  const float4 b = reinterpret_cast<const float4*>(src)[1];
  dst[0] = a.x, dst[1] = a.y, dst[2] = a.z, dst[3] = a.w;
  dst[4] = b.x, dst[5] = b.y, dst[6] = b.z, dst[7] = b.w;
}

__device__ __forceinline__ void Store8(float* dst, const float (&src)[kVec]) {
  reinterpret_cast<float4*>(dst)[0] = make_float4(src[0], src[1], src[2], src[3]);
  reinterpret_cast<float4*>(dst)[1] = make_float4(src[4], src[5], src[6], src[7]);
}

template <typename G>
__device__ __forceinline__ void LoadGrad8(const void* grad, uint64_t i, float (&g)[kVec]) {
  if constexpr (sizeof(typename G::T) == 4) {
    Load8(static_cast<const float*>(grad) + i, g);
  } else {
    uint16_t h[kVec];
    Unpack16(*reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(grad) + i), h);
#pragma unroll
    for (int k = 0; k < kVec; ++k) g[k] = G::Load(h[k]);
  }
}

// Elements [i, i + kVec) of tensor d, all arrays 16-byte aligned there.
template <FusedOptimizerKind K, typename G, typename P>
__device__ __forceinline__ void VectorStep(const Params& p, const TensorDesc& d, float decay,
                                           uint64_t i) {
  float w[kVec], s0[kVec], s1[kVec], g[kVec];
  const bool use_s0 = K != FusedOptimizerKind::kSgd || p.has_momentum;
  Load8(d.master + i, w);
  if (use_s0) Load8(d.state0 + i, s0);
  if constexpr (kUsesState1<K>) Load8(d.state1 + i, s1);
  LoadGrad8<G>(d.grad, i, g);
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    UpdateElement<K>(p, d.weight_decay, decay, g[k] * p.grad_scale, w[k], s0[k], s1[k]);
  }
  Store8(d.master + i, w);
  if (use_s0) Store8(d.state0 + i, s0);
  if constexpr (kUsesState1<K>) Store8(d.state1 + i, s1);
  if (d.param_out != nullptr) {
    uint16_t h[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) h[k] = P::Store(w[k]);
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(d.param_out) + i) = Pack16(h);
  }
}

template <FusedOptimizerKind K, typename G, typename P>
__device__ __forceinline__ void ScalarStep(const Params& p, const TensorDesc& d, float decay,
                                           uint64_t i) {
  const bool use_s0 = K != FusedOptimizerKind::kSgd || p.has_momentum;
  float w = d.master[i];
  float s0 = use_s0 ? d.state0[i] : 0.0f;
  float s1 = 0.0f;
  if constexpr (kUsesState1<K>) s1 = d.state1[i];
  const float g = G::Load(static_cast<const typename G::T*>(d.grad)[i]);
  UpdateElement<K>(p, d.weight_decay, decay, g * p.grad_scale, w, s0, s1);
  d.master[i] = w;
  if (use_s0) d.state0[i] = s0;
  if constexpr (kUsesState1<K>) d.state1[i] = s1;
  if (d.param_out != nullptr) static_cast<uint16_t*>(d.param_out)[i] = P::Store(w);
}

// Blocks stride over the launch's chunks; threads over one chunk's elements.
template <FusedOptimizerKind K, typename G, typename P>
__device__ void RunChunks(const Params& p, const TensorDesc* table) {
  for (uint64_t c = blockIdx.x; c < p.total_chunks; c += gridDim.x) {
    // The last tensor whose first chunk is <= c (empty tensors are not in the table).
    uint32_t lo = 0, hi = p.num_tensors - 1;
    while (lo < hi) {
      const uint32_t mid = (lo + hi + 1) / 2;
      if (table[mid].first_chunk <= c) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const TensorDesc d = table[lo];
    const float decay = 1.0f - p.lr * d.weight_decay;
    const uint64_t local = c - d.first_chunk;
    const uint64_t begin = d.head + local * kFusedOptimizerChunk;
    const uint64_t end = d.n < begin + kFusedOptimizerChunk ? d.n : begin + kFusedOptimizerChunk;
    if (local == 0 && threadIdx.x < d.head) ScalarStep<K, G, P>(p, d, decay, threadIdx.x);
    const uint64_t nvec = d.vec ? (end - begin) / kVec : 0;
    for (uint64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
      VectorStep<K, G, P>(p, d, decay, begin + v * kVec);
    }
    for (uint64_t i = begin + nvec * kVec + threadIdx.x; i < end; i += blockDim.x) {
      ScalarStep<K, G, P>(p, d, decay, i);
    }
  }
}

template <typename G, typename P>
__device__ __forceinline__ void Dispatch(const Params& p, const TensorDesc* table) {
  switch (p.kind) {
    case FusedOptimizerKind::kAdamW:
      RunChunks<FusedOptimizerKind::kAdamW, G, P>(p, table);
      break;
    case FusedOptimizerKind::kAdam:
      RunChunks<FusedOptimizerKind::kAdam, G, P>(p, table);
      break;
    case FusedOptimizerKind::kSgd:
      RunChunks<FusedOptimizerKind::kSgd, G, P>(p, table);
      break;
    case FusedOptimizerKind::kAdagrad:
      RunChunks<FusedOptimizerKind::kAdagrad, G, P>(p, table);
      break;
    case FusedOptimizerKind::kLion:
      RunChunks<FusedOptimizerKind::kLion, G, P>(p, table);
      break;
  }
}

// Short lists: the table lives in the kernel's parameter space (__grid_constant__ lets the
// kernel index it in place instead of copying it to local memory).
template <typename G, typename P>
__global__ void __launch_bounds__(kThreads)
    FusedOptimizerInlineKernel(const Params p, const __grid_constant__ InlineTable table) {
  Dispatch<G, P>(p, table.tensors);
}

// Long lists: the table was copied to device memory just before the launch.
template <typename G, typename P>
__global__ void __launch_bounds__(kThreads)
    FusedOptimizerTableKernel(const Params p, const TensorDesc* table) {
  Dispatch<G, P>(p, table);
}

bool NeedsState0(const FusedOptimizerHyper& h) {
  return h.kind != FusedOptimizerKind::kSgd || h.beta1 != 0.0f;
}
bool NeedsState1(const FusedOptimizerHyper& h) {
  return h.kind == FusedOptimizerKind::kAdamW || h.kind == FusedOptimizerKind::kAdam;
}

// The smallest head in [0, kVec) that 16-byte aligns every array used, or -1.
int AlignedHead(const FusedOptimizerHyper& h, const FusedOptimizerTensor& t, size_t grad_bytes) {
  struct Array {
    const void* ptr;
    size_t elem_bytes;
  };
  Array arrays[5];
  int count = 0;
  arrays[count++] = {t.master, 4};
  if (NeedsState0(h)) arrays[count++] = {t.state0, 4};
  if (NeedsState1(h)) arrays[count++] = {t.state1, 4};
  arrays[count++] = {t.grad, grad_bytes};
  if (t.param_out != nullptr) arrays[count++] = {t.param_out, 2};
  for (int head = 0; head < kVec; ++head) {
    bool ok = true;
    for (int a = 0; a < count && ok; ++a) {
      ok = (reinterpret_cast<uintptr_t>(arrays[a].ptr) + head * arrays[a].elem_bytes) % 16 == 0;
    }
    if (ok) return head;
  }
  return -1;
}

template <typename G, typename P>
cudaError_t LaunchTyped(const Params& p, const std::vector<TensorDesc>& table, void* workspace,
                        cudaStream_t stream) {
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const bool inline_table = table.size() <= kFusedOptimizerInlineTensors;
  if (err == cudaSuccess) {
    err = inline_table ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                             &per_sm, FusedOptimizerInlineKernel<G, P>, kThreads, 0)
                       : cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                             &per_sm, FusedOptimizerTableKernel<G, P>, kThreads, 0);
  }
  if (err != cudaSuccess) return err;
  // One resident wave: more blocks only add scheduling; the grid-stride loop covers the rest.
  const uint64_t wave = uint64_t(std::max(1, sms)) * uint64_t(std::max(1, per_sm));
  const unsigned blocks = unsigned(std::min<uint64_t>(p.total_chunks, wave));
  if (inline_table) {
    InlineTable inline_tensors{};
    std::copy(table.begin(), table.end(), inline_tensors.tensors);
    FusedOptimizerInlineKernel<G, P><<<blocks, kThreads, 0, stream>>>(p, inline_tensors);
  } else {
    // Pageable host -> device: the runtime stages `table` before returning, so the vector may
    // go away at once; stream order keeps the kernel after the copy.
    err = cudaMemcpyAsync(workspace, table.data(), table.size() * sizeof(TensorDesc),
                          cudaMemcpyHostToDevice, stream);
    if (err != cudaSuccess) return err;
    FusedOptimizerTableKernel<G, P>
        <<<blocks, kThreads, 0, stream>>>(p, static_cast<const TensorDesc*>(workspace));
  }
  return cudaGetLastError();
}

template <typename G>
cudaError_t LaunchForGrad(const FusedOptimizerHyper& h, const Params& p,
                          const std::vector<TensorDesc>& table, void* workspace,
                          cudaStream_t stream) {
  if (h.param_type == FusedParamType::kBF16) {
    return LaunchTyped<G, BF16Element>(p, table, workspace, stream);
  }
  return LaunchTyped<G, F16Element>(p, table, workspace, stream);
}

}  // namespace

size_t FusedOptimizerWorkspaceBytes(size_t num_tensors) {
  return num_tensors <= kFusedOptimizerInlineTensors ? 0 : num_tensors * sizeof(TensorDesc);
}

cudaError_t LaunchFusedOptimizer(const FusedOptimizerHyper& hyper,
                                 const FusedOptimizerTensor* tensors, size_t num_tensors,
                                 void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (uint8_t(hyper.kind) > uint8_t(FusedOptimizerKind::kLion) ||
      uint8_t(hyper.grad_type) > uint8_t(FusedGradType::kF16) ||
      uint8_t(hyper.param_type) > uint8_t(FusedParamType::kF16) || hyper.step < 1 ||
      (num_tensors > 0 && tensors == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const size_t grad_bytes = hyper.grad_type == FusedGradType::kF32 ? 4 : 2;
  std::vector<TensorDesc> table;
  table.reserve(num_tensors);
  uint64_t chunks = 0;
  for (size_t i = 0; i < num_tensors; ++i) {
    const FusedOptimizerTensor& t = tensors[i];
    if (t.n == 0) continue;
    if (t.master == nullptr || t.grad == nullptr || (NeedsState0(hyper) && t.state0 == nullptr) ||
        (NeedsState1(hyper) && t.state1 == nullptr)) {
      return cudaErrorInvalidValue;
    }
    const int aligned_head = AlignedHead(hyper, t, grad_bytes);
    TensorDesc d{};
    d.master = t.master;
    d.state0 = t.state0;
    d.state1 = t.state1;
    d.grad = t.grad;
    d.param_out = t.param_out;
    d.n = t.n;
    d.first_chunk = chunks;
    d.vec = aligned_head >= 0 ? 1 : 0;
    d.head = uint32_t(std::min<uint64_t>(std::max(aligned_head, 0), t.n));
    d.weight_decay = t.weight_decay;
    table.push_back(d);
    chunks +=
        std::max<uint64_t>(1, (t.n - d.head + kFusedOptimizerChunk - 1) / kFusedOptimizerChunk);
  }
  if (table.empty()) return cudaSuccess;
  const size_t need = FusedOptimizerWorkspaceBytes(table.size());
  if (need > 0 && (workspace == nullptr || workspace_bytes < need ||
                   reinterpret_cast<uintptr_t>(workspace) % alignof(TensorDesc) != 0)) {
    return cudaErrorInvalidValue;
  }

  Params p{};
  p.kind = hyper.kind;
  p.nesterov = hyper.nesterov;
  p.has_momentum = hyper.beta1 != 0.0f;
  p.first_step = hyper.step == 1;
  p.lr = hyper.lr;
  p.beta1 = hyper.beta1;
  p.beta2 = hyper.beta2;
  p.one_minus_beta1 = 1.0f - hyper.beta1;
  p.one_minus_beta2 = 1.0f - hyper.beta2;
  p.eps = hyper.eps;
  p.grad_scale = hyper.grad_scale;
  // Bias corrections in double, rounded once (beta^step underflows harmlessly to 0).
  const double bc1 = 1.0 - std::pow(double(hyper.beta1), double(hyper.step));
  const double bc2 = 1.0 - std::pow(double(hyper.beta2), double(hyper.step));
  p.step_size = float(double(hyper.lr) / bc1);
  p.inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  p.num_tensors = uint32_t(table.size());
  p.total_chunks = chunks;

  switch (hyper.grad_type) {
    case FusedGradType::kF32:
      return LaunchForGrad<F32Element>(hyper, p, table, workspace, stream);
    case FusedGradType::kBF16:
      return LaunchForGrad<BF16Element>(hyper, p, table, workspace, stream);
    case FusedGradType::kF16:
      return LaunchForGrad<F16Element>(hyper, p, table, workspace, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace zs::kernels
