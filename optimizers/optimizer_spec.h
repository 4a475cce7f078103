// OptimizerSpec and ShardStep: what one optimizer step over one shard needs, as plain values.
// Shared by the CPU kernels (optimizers/cpu_optimizer.h), the CUDA launchers
// (kernels/cuda/fused_optimizer.h takes the same numbers as raw arguments), the float64
// references (optimizers/reference_optimizers.h) and the engine.
//
// Contract
// - [Note: state layout] A shard of n elements (the rank's optimizer range; padding included)
//   has an fp32 master copy (n floats) and up to two state tensors, each n elements of the
//   state dtype, in the shard's element order:
//     AdamW / Adam   state0 = exp_avg (m), state1 = exp_avg_sq (v)
//     SGD            state0 = momentum buffer (absent when momentum == 0), state1 absent
//     Adagrad        state0 = sum of squared gradients, state1 absent
//     Lion           state0 = exp_avg (m), state1 absent
//   StateDType::kBF16 stores each state as bf16, rounded stochastically (below).
//   StateDType::kInt8 stores each state as int8 codes in blocks of kQuantBlock elements with one
//   fp32 scale per block (scales[n / kQuantBlock rounded up]), block b covering shard elements
//   [b * kQuantBlock, (b + 1) * kQuantBlock): value = code * scale (signed, symmetric: scale =
//   max |x| / 127 of the block); second moments (always >= 0) use the same symmetric code.
//   [Note: int8 second moments] Linear int8 codes cannot hold a second moment: within one block
//   v spans many decades, small v round to 0 and m / (sqrt(0) + eps) explodes. So the
//   second-moment states (Adam's and AdamW's state1, Adagrad's state0) are stored in int8 as
//   sqrt(v), which has the dynamic range of m (and of g): where sqrt(v) rounds to 0, m does too
//   and the update is 0 rather than m / eps. Int8StoresRoot says which states.
//   [Note: int8 quantization] code = round-to-nearest-even(x * inv), inv = 127 / max |x|
//   computed once per block (float): one division per block instead of one per element (a
//   vector division costs as much as the rest of the encoding). |x * inv| < 127.5, so codes
//   stay in [-127, 127] unclamped. It can differ from round(x / scale) only for x within an
//   ulp of a tie, where either code is as near. Blocks so small that inv overflows, and
//   blocks holding inf or NaN, use x / scale, clamped.
//   Checkpoints and offload move these arrays as they are; NumStates/StateBytes say how many
//   bytes each holds.
// - [Note: bit-identical splits] Every element's update depends only on that element's inputs,
//   the hyper-parameters, the step and (for stochastic rounding) a counter-based random value
//   keyed by (seed, step, state index, index_base + shard element index). Int8 blocks are
//   requantized as a whole, so tiles handed to threads start at multiples of kQuantBlock.
//   Hence results are bit-identical whatever the thread count or tile split.
// - Weight decay comes from the parameters' specs as segments: ShardStep::segments cover
//   [0, n) in order, each with its own weight-decay factor (0 where the spec says no decay and
//   in padding). The kernels never infer it.
// - [Note: parameter groups] Each segment also names its parameter group: an index into
//   ShardStep::groups, whose lr, beta1, beta2 and eps replace OptimizerHyper's for that
//   segment (bias corrections follow each group's betas). With no groups every segment is in
//   group 0 and uses OptimizerHyper's values. What groups share is OptimizerHyper's: the kind,
//   the step, nesterov, Adagrad's initial accumulator, and (SGD) whether a momentum buffer
//   exists: a group's beta1 is zero exactly when OptimizerHyper's is.
// - Gradients are read in their stored dtype (f32/bf16/f16) and multiplied by grad_scale (loss
//   unscaling and clipping folded in). The updated weights are optionally written, rounded to
//   nearest even, to param_out in param_dtype in the same pass.
// - [Note: streaming param_out] param_out is the one array a step only writes. Ordinary stores
//   first read each of its cache lines from memory (read for ownership), so a step whose arrays
//   do not fit in the last-level cache moves 2 more bytes per bf16 copy than it needs: 30 bytes
//   per parameter instead of 28 for AdamW with fp32 states and bf16 gradients, 22 instead of 20
//   with bf16 states. Non-temporal (streaming) stores write whole lines without reading them,
//   but leave nothing in the cache, which only pays when the copy would be evicted before it is
//   read anyway. ShardStep::param_out_stores chooses; kAuto streams when the step's arrays
//   (CpuOptimizer::StepWorkingSetBytes) exceed a quarter of the last-level cache
//   (CpuOptimizer::CacheResidentLimitBytes: the cache is shared, and the forward and backward
//   passes between two steps run through it). The bits written are the same either way.
// - [Note: software prefetch] A step streams its inputs from memory, and on some cores the
//   hardware prefetchers do not run far enough ahead of a loop that also has real arithmetic
//   (a square root and a division per element): the floor pass, with one add per element,
//   reaches the memory bandwidth, while the AdamW step over the same arrays stalled on loads
//   (0.86-0.87 of the floor at 50M and 200M parameters, 2 threads, on a 2-core Intel Xeon with
//   AVX-512). Prefetching every line the step will read (master, gradient, states as stored) a
//   fixed number of elements ahead (prefetcht0) closes most of that gap there (0.94-0.96),
//   where the floor itself gains nothing from the same prefetches. On an AMD Zen 4 host,
//   prefetching 512 or 2048 elements ahead made the steps 25-50% slower (docs/PERFORMANCE.md). So
//   ShardStep::prefetch_elements says how far ahead (0: no software prefetch), and
//   kAutoPrefetch picks CpuOptimizer::kDefaultPrefetchElements on Intel x86 CPUs whatever the
//   size, none elsewhere (CpuOptimizer::PrefetchElements): where the arrays are cached the
//   prefetches cost nothing measurable (L2 and L3 alike on that host), and a size rule missed
//   steps that had already left the cache (docs/PERFORMANCE.md, "2026-12-06 (second)").
//   Prefetches only read: the bits written are the same whatever the distance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "runtime/base/dtype.h"

namespace zs {

enum class OptimizerKind : uint8_t { kAdamW, kAdam, kSgd, kAdagrad, kLion };
std::string_view OptimizerKindName(OptimizerKind kind);  // "AdamW", "Adam", "SGD", ...

enum class StateDType : uint8_t { kF32, kBF16, kInt8 };
std::string_view StateDTypeName(StateDType t);  // "fp32", "bf16", "int8"

inline constexpr int64_t kQuantBlock = 256;  // elements per int8 block (one fp32 scale each)

struct OptimizerHyper {
  OptimizerKind kind = OptimizerKind::kAdamW;
  float lr = 1e-3f;
  float beta1 = 0.9f;                // Adam/Lion first moment; SGD momentum
  float beta2 = 0.999f;              // Adam second moment; Lion's second interpolation factor
  float eps = 1e-8f;                 // Adam, Adagrad
  bool nesterov = false;             // SGD
  float initial_accumulator = 0.0f;  // Adagrad: the accumulator's initial value
  int64_t step = 1;  // optimizer steps counted from 1 (bias correction, random streams)
};

// Update rules (g = grad * grad_scale, w = master, wd = the segment's weight decay):
//   AdamW   w *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//           w -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bc_i = 1 - b_i^step
//   Adam    as AdamW with g += wd * w first and no decoupled decay
//   SGD     g += wd * w; momentum 0: w -= lr g; else buf = b1 buf + g (buf = g at step 1);
//           w -= lr * (nesterov ? g + b1 buf : buf)
//   Adagrad g += wd * w; s += g^2; w -= lr * g / (sqrt(s) + eps)
//   Lion    w *= 1 - lr*wd; w -= lr * sign(b1 m + (1-b1) g); m = b2 m + (1-b2) g
inline constexpr int NumStates(OptimizerKind kind, float momentum) {
  switch (kind) {
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdam:
      return 2;
    case OptimizerKind::kSgd:
      return momentum != 0.0f ? 1 : 0;
    case OptimizerKind::kAdagrad:
    case OptimizerKind::kLion:
      return 1;
  }
  return 0;
}

// Whether int8 state `state` of `kind` holds the square root of its value ([Note: int8 second
// moments]).
inline constexpr bool Int8StoresRoot(OptimizerKind kind, int state) {
  return ((kind == OptimizerKind::kAdamW || kind == OptimizerKind::kAdam) && state == 1) ||
         (kind == OptimizerKind::kAdagrad && state == 0);
}

// Bytes of one element's code (int8's block scales not counted).
inline constexpr size_t StateCodeBytes(StateDType t) {
  return t == StateDType::kF32 ? 4 : t == StateDType::kBF16 ? 2 : 1;
}

// Bytes of one state tensor of n elements (int8: codes plus the block scales).
inline constexpr int64_t StateBytes(StateDType t, int64_t n) {
  switch (t) {
    case StateDType::kF32:
      return 4 * n;
    case StateDType::kBF16:
      return 2 * n;
    case StateDType::kInt8:
      return n + 4 * ((n + kQuantBlock - 1) / kQuantBlock);
  }
  return 0;
}

struct ShardSegment {
  int64_t begin = 0;  // shard elements [begin, end)
  int64_t end = 0;
  float weight_decay = 0.0f;
  int32_t group = 0;  // index into ShardStep::groups (0 when there are none)
};

// The hyper-parameters a parameter group may set apart ([Note: parameter groups]).
struct GroupHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

// The group values OptimizerHyper itself holds (the default group).
inline GroupHyper GroupOf(const OptimizerHyper& hyper) {
  return {hyper.lr, hyper.beta1, hyper.beta2, hyper.eps};
}

// OptimizerHyper with one group's values in place of its own.
inline OptimizerHyper WithGroup(OptimizerHyper hyper, const GroupHyper& group) {
  hyper.lr = group.lr;
  hyper.beta1 = group.beta1;
  hyper.beta2 = group.beta2;
  hyper.eps = group.eps;
  return hyper;
}

// How a step stores param_out ([Note: streaming param_out]).
enum class ParamOutStores : uint8_t {
  kAuto,       // kStreaming when the step's arrays exceed a quarter of the LLC, else kCached
  kCached,     // ordinary stores: the copy stays in cache for a reader that comes soon
  kStreaming,  // non-temporal stores wherever param_out is vector-aligned
};

// ShardStep::prefetch_elements: let CpuOptimizer::PrefetchElements choose.
inline constexpr int64_t kAutoPrefetch = -1;

// ShardStep::cache_resident_bytes: a quarter of the last-level cache
// (CpuOptimizer::CacheResidentLimitBytes).
inline constexpr int64_t kAutoCacheResident = -1;

// One optimizer step over shard elements [0, n).
struct ShardStep {
  int64_t n = 0;
  float* master = nullptr;                     // n fp32
  void* state[2] = {nullptr, nullptr};         // n elements of state_dtype each (int8: codes)
  float* state_scale[2] = {nullptr, nullptr};  // int8 only: ceil(n / kQuantBlock) scales each
  StateDType state_dtype = StateDType::kF32;
  const void* grad = nullptr;  // n elements of grad_dtype
  DType grad_dtype = DType::kF32;
  float grad_scale = 1.0f;
  void* param_out = nullptr;  // optional: n elements of param_dtype
  DType param_dtype = DType::kBF16;
  ParamOutStores param_out_stores = ParamOutStores::kAuto;
  // Elements ahead of the loop whose input lines are prefetched, 0 for none, or kAutoPrefetch
  // ([Note: software prefetch]).
  int64_t prefetch_elements = kAutoPrefetch;
  // The largest working set (CpuOptimizer::StepWorkingSetBytes) param_out_stores = kAuto treats
  // as cache-resident (beyond it param_out streams): kAutoCacheResident, or bytes (0: always
  // beyond), for hosts whose caches sysfs misdescribes.
  int64_t cache_resident_bytes = kAutoCacheResident;
  std::span<const ShardSegment> segments;  // cover [0, n) in order
  std::span<const GroupHyper> groups;      // empty: one group, OptimizerHyper's values
  uint64_t seed = 0;                       // stochastic rounding stream (bf16 states)
  // Where element 0 lies in the stochastic-rounding stream (>= 0): a range [k, k + n) of a
  // larger shard, stepped alone with index_base = k and that shard's seed, gets the bits the
  // whole shard's step gives it ([Note: bit-identical splits]; with int8 states k must be a
  // multiple of kQuantBlock; offload steps a shard in sub-groups this way).
  int64_t index_base = 0;
};

}  // namespace zs
