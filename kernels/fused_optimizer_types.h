// The arguments of the fused multi-tensor optimizer step: what kernels/cuda/fused_optimizer.h
// launches on the GPU and kernels/fused_optimizer_reference.h runs on the CPU, with the same
// meaning and the same bits. No CUDA headers: CPU-only builds use it too.
//
// Contract
// - The update rules and the state layout are optimizers/optimizer_spec.h's ([Note: state
//   layout]), taken here as raw arguments: device (or host) pointers, element counts and 16-bit
//   patterns for bf16/f16 values.
// - A tensor is a parameter, or a weight-decay segment of a shard. Its elements are independent
//   of one another and of the list: an element's result depends only on its own inputs (int8
//   states: its block's), the hyper-parameters, the tensor's weight decay and (bf16 states) its
//   index, never on the order of the list, the chunking or the grid.
// - States (FusedStateType, one per launch):
//   - kF32: n floats each.
//   - kBF16: n bf16 codes each, rounded stochastically with the bits of shard element
//     `index_base + i` under `seed` and `step` ([Note: stochastic rounding bits] in
//     optimizers/stochastic_rounding.h), so a tensor that is segment [b, e) of a CPU shard,
//     passed with index_base = b and the shard's seed, gets the CPU's codes bit for bit.
//   - kInt8: n int8 codes each, in blocks of kFusedQuantBlock elements counted from the
//     tensor's element 0, with one fp32 scale per block (state0_scales / state1_scales,
//     ceil(n / kFusedQuantBlock) each); second moments held as their square roots ([Note: int8
//     second moments]). A block never spans two tensors, so a CPU shard's layout is matched
//     when its segments start at multiples of the block (index_base is ignored).
// - param_out, when not null, receives the updated master rounded to nearest, ties to even,
//   in `param_type`.
// - FusedOptimizerArgsError says why a launch is refused, or returns null: both the GPU launch
//   (cudaErrorInvalidValue) and the CPU reference (false) refuse exactly these.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zs::kernels {

// Same order as zs::OptimizerKind (optimizers/optimizer_spec.h).
enum class FusedOptimizerKind : uint8_t { kAdamW, kAdam, kSgd, kAdagrad, kLion };
enum class FusedGradType : uint8_t { kF32, kBF16, kF16 };
enum class FusedParamType : uint8_t { kBF16, kF16 };
// Same order as zs::StateDType.
enum class FusedStateType : uint8_t { kF32, kBF16, kInt8 };

inline constexpr size_t kFusedQuantBlock = 256;  // zs::kQuantBlock

// One tensor of the list.
struct FusedOptimizerTensor {
  float* master = nullptr;  // n fp32, updated in place
  // n elements of the launch's state_type, or null where the kind needs none: AdamW/Adam m
  // (state0) and v (state1); SGD the momentum buffer (state0, absent when beta1 == 0); Adagrad
  // the sum of squares (state0); Lion m (state0).
  void* state0 = nullptr;
  void* state1 = nullptr;
  float* state0_scales = nullptr;  // kInt8: the block scales of state0 / state1
  float* state1_scales = nullptr;
  const void* grad = nullptr;  // n elements of the launch's grad_type
  void* param_out = nullptr;   // n elements of the launch's param_type, or null: not written
  size_t n = 0;
  float weight_decay = 0.0f;
  uint64_t index_base = 0;  // kBF16: the shard index of element 0 (the rounding stream)
};

// Hyper-parameters of one launch; see optimizer_spec.h's OptimizerHyper for their meaning.
struct FusedOptimizerHyper {
  FusedOptimizerKind kind = FusedOptimizerKind::kAdamW;
  float lr = 1e-3f;
  float beta1 = 0.9f;       // Adam/Lion first moment; SGD momentum (0: no momentum buffer)
  float beta2 = 0.999f;     // Adam second moment; Lion's second interpolation factor
  float eps = 1e-8f;        // Adam, Adagrad
  bool nesterov = false;    // SGD
  int64_t step = 1;         // counted from 1: bias correction, SGD's first momentum step
  float grad_scale = 1.0f;  // g = grad * grad_scale (loss unscaling and clipping folded in)
  FusedGradType grad_type = FusedGradType::kF32;
  FusedParamType param_type = FusedParamType::kBF16;
  FusedStateType state_type = FusedStateType::kF32;
  uint64_t seed = 0;  // kBF16 states: the rounding stream (ShardStep::seed)
};

// Bytes of one state element (int8: the code; block scales apart).
inline constexpr size_t FusedStateElementBytes(FusedStateType t) {
  return t == FusedStateType::kF32 ? 4 : t == FusedStateType::kBF16 ? 2 : 1;
}

// Whether the kind keeps state0 / state1 (SGD keeps state0 only with momentum).
inline bool FusedNeedsState0(const FusedOptimizerHyper& h) {
  return h.kind != FusedOptimizerKind::kSgd || h.beta1 != 0.0f;
}
inline bool FusedNeedsState1(const FusedOptimizerHyper& h) {
  return h.kind == FusedOptimizerKind::kAdamW || h.kind == FusedOptimizerKind::kAdam;
}

// Null when the launch is valid, else why not: an unknown kind or type, step < 1, a null list
// with num_tensors > 0, or a tensor with n > 0 and a null master or grad, a state the kind
// needs but null, (kInt8) a needed state's scales null, or (kBF16) more than 2^32 elements
// (its indices would span three runs of rounding keys). Empty tensors may hold nulls.
const char* FusedOptimizerArgsError(const FusedOptimizerHyper& hyper,
                                    const FusedOptimizerTensor* tensors, size_t num_tensors);

}  // namespace zs::kernels
