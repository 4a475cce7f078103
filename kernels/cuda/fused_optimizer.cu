// The fused multi-tensor optimizer kernel. See [Note: multi-tensor launch] in fused_optimizer.h
// for how a list becomes chunks, and kernels/optimizer_element.h for each element's arithmetic
// (shared with the CPU reference: this file is compiled with --fmad=false).
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cuda/fused_optimizer.h"
#include "kernels/float_bits.h"
#include "kernels/optimizer_element.h"
#include "kernels/stochastic_rounding_bits.h"

namespace zs::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kVec =
    8;  // elements per vector step: 2 x float4 for fp32, one 16-byte load for 16-bit
constexpr int kInt8PerLane = int(kFusedQuantBlock) / 32;  // a warp's lanes over one int8 block
static_assert(kFusedOptimizerChunk % kVec == 0, "chunks must start on vector boundaries");

// One tensor of the list as the kernel sees it. Its elements [0, head) are done by the first
// chunk with scalar code; chunk k >= 0 then covers [head + k * C, head + (k + 1) * C) ∩ [0, n),
// vectorized when `vec` (every array used is 16-byte aligned at element `head`). int8 tensors
// have head 0 and no vector path.
struct TensorDesc {
  float* master;
  void* state0;
  void* state1;
  float* scales0;
  float* scales1;
  const void* grad;
  void* param_out;
  uint64_t n;
  uint64_t first_chunk;  // index of this tensor's first chunk in the launch
  uint32_t head;         // < kVec, <= n
  uint32_t vec;          // 1: vector path
  float weight_decay;
  // bf16 states: element i's shard index is index_base + i; its rounding key is key_lo below
  // `index_split` (the first element whose index has the next high 32 bits), key_hi from there.
  uint64_t index_base;
  uint64_t index_split;
  sr::SrKey key_lo, key_hi;
};

struct InlineTable {
  TensorDesc tensors[kFusedOptimizerInlineTensors];
};

// Per-launch values.
struct Params {
  FusedOptimizerKind kind;
  FusedStepConstants c;
  uint32_t num_tensors;
  uint64_t total_chunks;
};

// ---- loads and stores ---------------------------------------------------------------------

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

// 8 elements of 16-bit values at `p` (16-byte aligned) widened by E::Load.
template <typename E>
__device__ __forceinline__ void Load8Of16(const void* p, float (&dst)[kVec]) {
  uint16_t h[kVec];
  Unpack16(*reinterpret_cast<const uint4*>(p), h);
#pragma unroll
  for (int k = 0; k < kVec; ++k) dst[k] = E::Load(h[k]);
}

template <typename G>
__device__ __forceinline__ void LoadGrad8(const void* grad, uint64_t i, float (&g)[kVec]) {
  if constexpr (sizeof(typename G::T) == 4) {
    Load8(static_cast<const float*>(grad) + i, g);
  } else {
    Load8Of16<G>(static_cast<const uint16_t*>(grad) + i, g);
  }
}

template <typename E>
__device__ __forceinline__ float LoadOne(const void* p, uint64_t i) {
  return E::Load(static_cast<const typename E::T*>(p)[i]);
}

// The hash of element i's shard index under its run's key (bf16 states).
__device__ __forceinline__ uint32_t ElementHash(const TensorDesc& d, uint64_t i) {
  const uint64_t index = d.index_base + i;
  return sr::SrHash(i < d.index_split ? d.key_lo : d.key_hi, uint32_t(index));
}

// fp32 and bf16 states: the states' element type.
template <FusedStateType S>
using StateElement = std::conditional_t<S == FusedStateType::kBF16, BF16Element, F32Element>;

// ---- fp32 and bf16 states: element-wise ---------------------------------------------------

// Elements [i, i + kVec) of tensor d, all arrays 16-byte aligned there.
template <FusedOptimizerKind K, typename G, typename P, FusedStateType S>
__device__ __forceinline__ void VectorStep(const Params& p, const TensorDesc& d, float decay,
                                           uint64_t i) {
  const FusedStepConstants& c = p.c;
  constexpr bool kTwo = kFusedNumStates<K> == 2;
  const bool reads0 = ReadsState0<K>(c), writes0 = WritesState0<K>(c);
  float w[kVec], s0[kVec] = {}, s1[kVec] = {}, g[kVec];
  Load8(d.master + i, w);
  LoadGrad8<G>(d.grad, i, g);
  if constexpr (S == FusedStateType::kBF16) {
    if (reads0) Load8Of16<BF16Element>(static_cast<const uint16_t*>(d.state0) + i, s0);
    if constexpr (kTwo) Load8Of16<BF16Element>(static_cast<const uint16_t*>(d.state1) + i, s1);
  } else {
    if (reads0) Load8(static_cast<const float*>(d.state0) + i, s0);
    if constexpr (kTwo) Load8(static_cast<const float*>(d.state1) + i, s1);
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    UpdateElement<K>(c, d.weight_decay, decay, /*as_root=*/false, ScaledGrad(c, g[k]), w[k], s0[k],
                     s1[k]);
  }
  Store8(d.master + i, w);
  if constexpr (S == FusedStateType::kBF16) {
    uint16_t h0[kVec], h1[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const uint32_t hash = ElementHash(d, i + k);
      h0[k] = sr::StochasticRoundToBF16Bits(s0[k], sr::SrBitsOfHash(hash, 0));
      h1[k] = sr::StochasticRoundToBF16Bits(s1[k], sr::SrBitsOfHash(hash, 1));
    }
    if (writes0) *reinterpret_cast<uint4*>(static_cast<uint16_t*>(d.state0) + i) = Pack16(h0);
    if constexpr (kTwo) {
      *reinterpret_cast<uint4*>(static_cast<uint16_t*>(d.state1) + i) = Pack16(h1);
    }
  } else {
    if (writes0) Store8(static_cast<float*>(d.state0) + i, s0);
    if constexpr (kTwo) Store8(static_cast<float*>(d.state1) + i, s1);
  }
  if (d.param_out != nullptr) {
    uint16_t h[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) h[k] = P::Store(w[k]);
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(d.param_out) + i) = Pack16(h);
  }
}

template <FusedOptimizerKind K, typename G, typename P, FusedStateType S>
__device__ __forceinline__ void ScalarStep(const Params& p, const TensorDesc& d, float decay,
                                           uint64_t i) {
  using SE = StateElement<S>;
  const FusedStepConstants& c = p.c;
  constexpr bool kTwo = kFusedNumStates<K> == 2;
  const bool reads0 = ReadsState0<K>(c), writes0 = WritesState0<K>(c);
  float w = d.master[i];
  float s0 = reads0 ? LoadOne<SE>(d.state0, i) : 0.0f;
  float s1 = kTwo ? LoadOne<SE>(d.state1, i) : 0.0f;
  UpdateElement<K>(c, d.weight_decay, decay, /*as_root=*/false,
                   ScaledGrad(c, LoadOne<G>(d.grad, i)), w, s0, s1);
  d.master[i] = w;
  if constexpr (S == FusedStateType::kBF16) {
    const uint32_t hash = ElementHash(d, i);
    if (writes0) {
      static_cast<uint16_t*>(d.state0)[i] =
          sr::StochasticRoundToBF16Bits(s0, sr::SrBitsOfHash(hash, 0));
    }
    if constexpr (kTwo) {
      static_cast<uint16_t*>(d.state1)[i] =
          sr::StochasticRoundToBF16Bits(s1, sr::SrBitsOfHash(hash, 1));
    }
  } else {
    if (writes0) static_cast<float*>(d.state0)[i] = s0;
    if constexpr (kTwo) static_cast<float*>(d.state1)[i] = s1;
  }
  if (d.param_out != nullptr) static_cast<uint16_t*>(d.param_out)[i] = P::Store(w);
}

template <FusedOptimizerKind K, typename G, typename P, FusedStateType S>
__device__ __forceinline__ void RunElementChunk(const Params& p, const TensorDesc& d, float decay,
                                                uint64_t local, uint64_t begin, uint64_t end) {
  if (local == 0 && threadIdx.x < d.head) ScalarStep<K, G, P, S>(p, d, decay, threadIdx.x);
  const uint64_t nvec = d.vec ? (end - begin) / kVec : 0;
  for (uint64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    VectorStep<K, G, P, S>(p, d, decay, begin + v * kVec);
  }
  for (uint64_t i = begin + nvec * kVec + threadIdx.x; i < end; i += blockDim.x) {
    ScalarStep<K, G, P, S>(p, d, decay, i);
  }
}

// ---- int8 states: a warp per block ----------------------------------------------------------

// The max of v over the warp's 32 lanes, in every lane (all lanes must call it). sm_80 and up
// reduce in one instruction; older GPUs take a butterfly of shuffles (max is order-free: same
// result).
__device__ __forceinline__ uint32_t WarpMax(uint32_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_max_sync(0xffffffffu, v);
#else
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
#endif
}

// Encodes one state's new values over the warp's block (every lane calls it): the block max of
// the lanes' maxima of |value| bits, then the codes and (lane 0) the scale.
__device__ __forceinline__ void EncodeWarpBlock(int8_t* codes, float* scales, uint64_t block,
                                                uint64_t base, uint32_t count, uint32_t max_bits,
                                                const float (&values)[kInt8PerLane]) {
  const uint32_t lane = threadIdx.x % 32;
  const Int8BlockCoder coder = MakeInt8BlockCoder(WarpMax(max_bits));
#pragma unroll
  for (int k = 0; k < kInt8PerLane; ++k) {
    const uint32_t j = lane + 32 * uint32_t(k);
    if (j < count) codes[base + j] = EncodeInt8(coder, values[k]);
  }
  if (lane == 0) scales[block] = coder.scale;
}

// The warp's block of tensor d at element `base` (count elements): lane l holds elements
// l + 32 k, so each load instruction of the warp reads consecutive elements. Every lane takes
// part in the max reductions (lanes past the end contribute 0).
template <FusedOptimizerKind K, typename G, typename P>
__device__ __forceinline__ void Int8BlockStep(const Params& p, const TensorDesc& d, float decay,
                                              uint64_t block, uint64_t base, uint32_t count) {
  const FusedStepConstants& c = p.c;
  constexpr bool kTwo = kFusedNumStates<K> == 2;
  const bool reads0 = ReadsState0<K>(c), writes0 = WritesState0<K>(c);
  const uint32_t lane = threadIdx.x % 32;
  auto* codes0 = static_cast<int8_t*>(d.state0);
  auto* codes1 = static_cast<int8_t*>(d.state1);
  const float scale0 = reads0 ? d.scales0[block] : 0.0f;
  const float scale1 = kTwo ? d.scales1[block] : 0.0f;
  float new0[kInt8PerLane], new1[kInt8PerLane];
  uint32_t max0 = 0, max1 = 0;
#pragma unroll
  for (int k = 0; k < kInt8PerLane; ++k) {
    const uint32_t j = lane + 32 * uint32_t(k);
    new0[k] = new1[k] = 0.0f;
    if (j >= count) continue;
    const uint64_t i = base + j;
    float w = d.master[i];
    float s0 = reads0 ? DecodeInt8(codes0[i], scale0) : 0.0f;
    float s1 = kTwo ? DecodeInt8(codes1[i], scale1) : 0.0f;
    UpdateElement<K>(c, d.weight_decay, decay, /*as_root=*/true,
                     ScaledGrad(c, LoadOne<G>(d.grad, i)), w, s0, s1);
    d.master[i] = w;
    if (d.param_out != nullptr) static_cast<uint16_t*>(d.param_out)[i] = P::Store(w);
    new0[k] = s0;
    new1[k] = s1;
    max0 = max(max0, AbsBits(s0));
    max1 = max(max1, AbsBits(s1));
  }
  // Every lane has read the old scales before lane 0 writes the new ones: the reductions
  // exchange values between all lanes, and __syncwarp orders the memory accesses too.
  __syncwarp();
  if (writes0) EncodeWarpBlock(codes0, d.scales0, block, base, count, max0, new0);
  if constexpr (kTwo) EncodeWarpBlock(codes1, d.scales1, block, base, count, max1, new1);
}

// A chunk of an int8 tensor: [begin, end) starts on a block; warps stride over its blocks.
template <FusedOptimizerKind K, typename G, typename P>
__device__ __forceinline__ void RunInt8Chunk(const Params& p, const TensorDesc& d, float decay,
                                             uint64_t begin, uint64_t end) {
  const uint64_t first_block = begin / kFusedQuantBlock;
  const uint64_t blocks = (end - begin + kFusedQuantBlock - 1) / kFusedQuantBlock;
  for (uint64_t b = threadIdx.x / 32; b < blocks; b += blockDim.x / 32) {
    const uint64_t base = begin + b * kFusedQuantBlock;
    const uint32_t count = uint32_t(end - base < kFusedQuantBlock ? end - base : kFusedQuantBlock);
    Int8BlockStep<K, G, P>(p, d, decay, first_block + b, base, count);
  }
}

// ---- the launch -----------------------------------------------------------------------------

// Blocks stride over the launch's chunks; threads over one chunk's elements.
template <FusedOptimizerKind K, typename G, typename P, FusedStateType S>
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
    const float decay = 1.0f - p.c.lr * d.weight_decay;
    const uint64_t local = c - d.first_chunk;
    const uint64_t begin = d.head + local * kFusedOptimizerChunk;
    const uint64_t end = d.n < begin + kFusedOptimizerChunk ? d.n : begin + kFusedOptimizerChunk;
    if constexpr (S == FusedStateType::kInt8) {
      RunInt8Chunk<K, G, P>(p, d, decay, begin, end);
    } else {
      RunElementChunk<K, G, P, S>(p, d, decay, local, begin, end);
    }
  }
}

template <typename G, typename P, FusedStateType S>
__device__ __forceinline__ void Dispatch(const Params& p, const TensorDesc* table) {
  switch (p.kind) {
    case FusedOptimizerKind::kAdamW:
      RunChunks<FusedOptimizerKind::kAdamW, G, P, S>(p, table);
      break;
    case FusedOptimizerKind::kAdam:
      RunChunks<FusedOptimizerKind::kAdam, G, P, S>(p, table);
      break;
    case FusedOptimizerKind::kSgd:
      RunChunks<FusedOptimizerKind::kSgd, G, P, S>(p, table);
      break;
    case FusedOptimizerKind::kAdagrad:
      RunChunks<FusedOptimizerKind::kAdagrad, G, P, S>(p, table);
      break;
    case FusedOptimizerKind::kLion:
      RunChunks<FusedOptimizerKind::kLion, G, P, S>(p, table);
      break;
  }
}

// Short lists: the table lives in the kernel's parameter space (__grid_constant__ lets the
// kernel index it in place instead of copying it to local memory).
template <typename G, typename P, FusedStateType S>
__global__ void __launch_bounds__(kThreads)
    FusedOptimizerInlineKernel(const Params p, const __grid_constant__ InlineTable table) {
  Dispatch<G, P, S>(p, table.tensors);
}

// Long lists: the table was copied to device memory just before the launch.
template <typename G, typename P, FusedStateType S>
__global__ void __launch_bounds__(kThreads)
    FusedOptimizerTableKernel(const Params p, const TensorDesc* table) {
  Dispatch<G, P, S>(p, table);
}

// The smallest head in [0, kVec) that 16-byte aligns every array used, or -1.
int AlignedHead(const FusedOptimizerHyper& h, const FusedOptimizerTensor& t) {
  struct Array {
    const void* ptr;
    size_t elem_bytes;
  };
  const size_t grad_bytes = h.grad_type == FusedGradType::kF32 ? 4 : 2;
  const size_t state_bytes = FusedStateElementBytes(h.state_type);  // int8 takes no vectors
  Array arrays[5];
  int count = 0;
  arrays[count++] = {t.master, 4};
  if (FusedNeedsState0(h)) arrays[count++] = {t.state0, state_bytes};
  if (FusedNeedsState1(h)) arrays[count++] = {t.state1, state_bytes};
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

template <typename G, typename P, FusedStateType S>
cudaError_t LaunchTyped(const Params& p, const std::vector<TensorDesc>& table, void* workspace,
                        cudaStream_t stream) {
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const bool inline_table = table.size() <= kFusedOptimizerInlineTensors;
  if (err == cudaSuccess) {
    err = inline_table ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                             &per_sm, FusedOptimizerInlineKernel<G, P, S>, kThreads, 0)
                       : cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                             &per_sm, FusedOptimizerTableKernel<G, P, S>, kThreads, 0);
  }
  if (err != cudaSuccess) return err;
  // One resident wave: more blocks only add scheduling; the grid-stride loop covers the rest.
  const uint64_t wave = uint64_t(std::max(1, sms)) * uint64_t(std::max(1, per_sm));
  const unsigned blocks = unsigned(std::min<uint64_t>(p.total_chunks, wave));
  if (inline_table) {
    InlineTable inline_tensors{};
    std::copy(table.begin(), table.end(), inline_tensors.tensors);
    FusedOptimizerInlineKernel<G, P, S><<<blocks, kThreads, 0, stream>>>(p, inline_tensors);
  } else {
    // Pageable host -> device: the runtime stages `table` before returning, so the vector may
    // go away at once; stream order keeps the kernel after the copy.
    err = cudaMemcpyAsync(workspace, table.data(), table.size() * sizeof(TensorDesc),
                          cudaMemcpyHostToDevice, stream);
    if (err != cudaSuccess) return err;
    FusedOptimizerTableKernel<G, P, S>
        <<<blocks, kThreads, 0, stream>>>(p, static_cast<const TensorDesc*>(workspace));
  }
  return cudaGetLastError();
}

template <typename G, typename P>
cudaError_t LaunchForState(const FusedOptimizerHyper& h, const Params& p,
                           const std::vector<TensorDesc>& table, void* workspace,
                           cudaStream_t stream) {
  switch (h.state_type) {
    case FusedStateType::kF32:
      return LaunchTyped<G, P, FusedStateType::kF32>(p, table, workspace, stream);
    case FusedStateType::kBF16:
      return LaunchTyped<G, P, FusedStateType::kBF16>(p, table, workspace, stream);
    case FusedStateType::kInt8:
      return LaunchTyped<G, P, FusedStateType::kInt8>(p, table, workspace, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename G>
cudaError_t LaunchForGrad(const FusedOptimizerHyper& h, const Params& p,
                          const std::vector<TensorDesc>& table, void* workspace,
                          cudaStream_t stream) {
  if (h.param_type == FusedParamType::kBF16) {
    return LaunchForState<G, BF16Element>(h, p, table, workspace, stream);
  }
  return LaunchForState<G, F16Element>(h, p, table, workspace, stream);
}

}  // namespace

size_t FusedOptimizerWorkspaceBytes(size_t num_tensors) {
  return num_tensors <= kFusedOptimizerInlineTensors ? 0 : num_tensors * sizeof(TensorDesc);
}

cudaError_t LaunchFusedOptimizer(const FusedOptimizerHyper& hyper,
                                 const FusedOptimizerTensor* tensors, size_t num_tensors,
                                 void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (FusedOptimizerArgsError(hyper, tensors, num_tensors) != nullptr) {
    return cudaErrorInvalidValue;
  }
  const bool int8 = hyper.state_type == FusedStateType::kInt8;
  std::vector<TensorDesc> table;
  table.reserve(num_tensors);
  uint64_t chunks = 0;
  for (size_t i = 0; i < num_tensors; ++i) {
    const FusedOptimizerTensor& t = tensors[i];
    if (t.n == 0) continue;
    const int aligned_head = int8 ? 0 : AlignedHead(hyper, t);
    TensorDesc d{};
    d.master = t.master;
    d.state0 = t.state0;
    d.state1 = t.state1;
    d.scales0 = t.state0_scales;
    d.scales1 = t.state1_scales;
    d.grad = t.grad;
    d.param_out = t.param_out;
    d.n = t.n;
    d.first_chunk = chunks;
    d.vec = !int8 && aligned_head >= 0 ? 1 : 0;
    d.head = uint32_t(std::min<uint64_t>(std::max(aligned_head, 0), t.n));
    d.weight_decay = t.weight_decay;
    if (hyper.state_type == FusedStateType::kBF16) {
      const uint64_t hi = t.index_base >> 32;
      d.index_base = t.index_base;
      d.index_split = ((hi + 1) << 32) - t.index_base;  // elements before the next run
      d.key_lo = sr::MakeSrKey(hyper.seed, hyper.step, uint32_t(hi));
      d.key_hi = sr::MakeSrKey(hyper.seed, hyper.step, uint32_t(hi + 1));
    }
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
  p.c = MakeFusedStepConstants(hyper);
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
