// Fused multi-tensor optimizer step on the GPU: AdamW, Adam, SGD (momentum, Nesterov), Adagrad
// and Lion over a list of tensors in one kernel launch, reading each gradient once and writing
// the updated master weights, the states and (optionally) a bf16/f16 copy of the weights in the
// same pass. The update rules and the state layout are optimizers/optimizer_spec.h's
// ([Note: state layout]); this header takes the same numbers as raw arguments.
//
// Contract
// - Leaves: device pointers, element counts, a caller-owned device workspace and a stream; no
//   runtime headers, no allocation. bf16/f16 values are 16-bit patterns.
// - States are fp32 only (state0/state1 as in optimizer_spec.h: AdamW/Adam m and v; SGD the
//   momentum buffer, absent when beta1 == 0; Adagrad the sum of squares; Lion m). Reduced-
//   precision states (bf16 with stochastic rounding, int8) are not implemented here.
// - Each tensor's elements are independent: the result of an element depends only on its own
//   inputs, the hyper-parameters and the tensor's weight decay, never on the list, the chunking
//   or the grid. Tensors must not overlap one another (a tensor's arrays must not overlap
//   either); any alignment is accepted (16-byte aligned arrays take the vector path, others a
//   scalar one).
// - param_out, when not null, receives the updated master rounded to nearest, ties to even,
//   in `param_type` (kernels/float_bits.h), bit-identical to a host-side cast of the new master.
// - [Note: multi-tensor launch] The host splits every tensor into chunks of
//   kFusedOptimizerChunk elements (after a short scalar head that aligns the vector loads) and
//   builds a table of the tensors with their first chunk index. Lists of at most
//   kFusedOptimizerInlineTensors tensors travel in the kernel's arguments (no workspace, safe
//   under CUDA graph capture); longer lists are copied by one cudaMemcpyAsync from pageable
//   host memory into `workspace` (FusedOptimizerWorkspaceBytes), which must then stay
//   untouched until the stream passes the launch (launches on one stream may reuse it). One
//   launch covers the whole list: blocks stride over the chunks (grid-stride), threads over a
//   chunk's elements with float4 / 8 x 16-bit loads.
// - LaunchFusedOptimizer only enqueues work on `stream` and returns at once with the launch
//   error; cudaErrorInvalidValue (nothing launched) for a bad argument: an unknown kind or
//   type, a null master or grad, a state the kind needs but null, a workspace too small. An
//   empty list or all-empty tensors launch nothing and return cudaSuccess.
// - Thread-safe for distinct workspaces (no global state).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace zs::kernels {

// Same order as zs::OptimizerKind (optimizers/optimizer_spec.h).
enum class FusedOptimizerKind : uint8_t { kAdamW, kAdam, kSgd, kAdagrad, kLion };
enum class FusedGradType : uint8_t { kF32, kBF16, kF16 };
enum class FusedParamType : uint8_t { kBF16, kF16 };

inline constexpr size_t kFusedOptimizerChunk = 16384;       // elements per chunk (a block's work)
inline constexpr size_t kFusedOptimizerInlineTensors = 24;  // lists passed as kernel arguments

// One tensor of the list (a parameter, or a weight-decay segment of a shard).
struct FusedOptimizerTensor {
  float* master = nullptr;     // n fp32, updated in place
  float* state0 = nullptr;     // n fp32 or null where the kind needs none (see above)
  float* state1 = nullptr;     // n fp32 (AdamW/Adam v), else ignored
  const void* grad = nullptr;  // n elements of the launch's grad_type
  void* param_out = nullptr;   // n elements of the launch's param_type, or null: not written
  size_t n = 0;
  float weight_decay = 0.0f;
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
};

// Device workspace bytes a list of num_tensors tensors needs (0 for inline lists).
size_t FusedOptimizerWorkspaceBytes(size_t num_tensors);

cudaError_t LaunchFusedOptimizer(const FusedOptimizerHyper& hyper,
                                 const FusedOptimizerTensor* tensors, size_t num_tensors,
                                 void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace zs::kernels
