// Internal to zs_optimizers: the Highway-vectorized update of one contiguous range with fp32,
// bf16 or int8 states and one weight decay, the leaf that CpuOptimizer (cpu_optimizer.cc) calls per
// tile and per weight-decay segment.
//
// Contract
// - RunOptimizerKernel updates args.n elements in place. Every element's result depends only on
//   its own inputs and the constants: the vector body and the tail (run through the same vector
//   code on a padded copy) give identical bits, so any split of a range gives the same result.
// - Arithmetic is plain IEEE float (no FMA contraction: the file is compiled with
//   -ffp-contract=off), divisions and square roots are exact-rounded (no approximations), and
//   the AdamW / Adam operation order is that of optimizers/adamw_reference.cc.
// - bf16 / f16 conversions (gradient in, param_out out) match runtime/base/dtype.h bit for bit
//   (round to nearest even, NaN and subnormal handling included).
// - Pure function of its arguments; thread-safe; no allocation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/optimizer_element.h"
#include "optimizers/optimizer_spec.h"
#include "optimizers/stochastic_rounding.h"
#include "runtime/base/dtype.h"

namespace zs::internal {

// Per-step constants, computed once per Step from OptimizerHyper: the kind, and the constants
// the GPU kernel computes the same way (kernels/optimizer_element.h; grad_scale is unused here,
// each range carries its own).
struct KernelConstants : kernels::FusedStepConstants {
  OptimizerKind kind = OptimizerKind::kAdamW;
};

KernelConstants MakeKernelConstants(const OptimizerHyper& hyper);

// One contiguous range [0, n) of pointers already offset to its first element.
struct KernelRange {
  int64_t n = 0;
  float* master = nullptr;
  // States, as state_dtype says: fp32 values; bf16 codes (decoded and stochastically rounded in
  // registers: [Note: fused bf16 states] in optimizer_kernels.cc); or int8 codes with their
  // per-block scales scale0 / scale1 (decoded in the loads and encoded block by block: [Note:
  // fused int8 states]; the range then starts at a kQuantBlock boundary, and its codes and
  // scales are addressed from there). Null when the kind lacks one.
  void* state0 = nullptr;
  void* state1 = nullptr;
  StateDType state_dtype = StateDType::kF32;
  float* scale0 = nullptr;
  float* scale1 = nullptr;
  // fp32 states only: the second moment (Adam's state1, Adagrad's state0) is held as its
  // square root, read and written so ([Note: int8 second moments]): the int8 path's scratch,
  // which then needs no squaring or square-root pass of its own. int8 codes always hold roots.
  bool second_moment_as_root = false;
  sr::SrKey sr_key;        // bf16 states: the key of the range's run of indices
  uint32_t index_lo = 0;   // bf16 states: low 32 bits of element 0's shard index
  const void* grad = nullptr;
  DType grad_dtype = DType::kF32;
  float grad_scale = 1.0f;
  void* param_out = nullptr;  // optional
  DType param_dtype = DType::kBF16;
  // param_out through non-temporal stores wherever it is vector-aligned ([Note: streaming
  // param_out] in optimizer_spec.h); the kernel fences them (sfence) before it returns.
  bool stream_param_out = false;
  // Prefetch the input lines of the element this many ahead of the loop, 0 for none ([Note:
  // software prefetch] in optimizer_spec.h). Only lines inside [0, n) are prefetched.
  uint32_t prefetch_elements = 0;
  float weight_decay = 0.0f;
};

void RunOptimizerKernel(const KernelConstants& c, const KernelRange& r);

// Where the kernel loop stops prefetching: a step of `step` elements starting at i prefetches
// the step `prefetch` elements ahead, [i + prefetch, i + prefetch + step), when i < the result,
// which is exactly when that step lies within [0, in_range). 0 when prefetch is 0.
inline size_t PrefetchingEnd(size_t prefetch, size_t in_range, size_t step) {
  return prefetch != 0 && in_range >= prefetch + step ? in_range - prefetch - step + 1 : 0;
}

// The Highway target RunOptimizerKernel dispatches to on this machine.
const char* OptimizerKernelTarget();

}  // namespace zs::internal
