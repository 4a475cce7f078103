// Fused multi-tensor optimizer step on the GPU: AdamW, Adam, SGD (momentum, Nesterov), Adagrad
// and Lion over a list of tensors in one kernel launch, reading each gradient once and writing
// the updated master weights, the states (fp32, bf16 with stochastic rounding, or int8 blocks)
// and (optionally) a bf16/f16 copy of the weights in the same pass. The arguments and what
// they mean are kernels/fused_optimizer_types.h's.
//
// Contract
// - Leaves: device pointers, element counts, a caller-owned device workspace and a stream; no
//   runtime headers, no allocation.
// - Written to be bit-identical to FusedOptimizerStepReference (kernels/
//   fused_optimizer_reference.h), which runs the same element functions
//   (kernels/optimizer_element.h) on the CPU and equals the SIMD CPU optimizer bit for bit, NaN
//   payloads aside (the GPU returns one canonical NaN where x86 keeps an operand's):
//   fused_optimizer.cu is compiled with --fmad=false, and divisions and square roots are
//   IEEE-rounded (nvcc's defaults, no --use_fast_math). kernels_cuda_optimizer_test checks it
//   on a GPU (none has been lent yet). A checkpoint or an offloaded step can therefore move a
//   shard between the GPU and the CPU without changing a bit of its trajectory.
// - Tensors must not overlap one another (a tensor's arrays must not overlap either); any
//   alignment is accepted (fp32 and bf16 states: arrays 16-byte aligned at a common element
//   take the vector path from there, others a scalar one; int8 states: one warp per block, lane
//   l taking elements l, l + 32, ..., so loads coalesce whatever the alignment). Arrays must be
//   aligned to their element size. sm_70 and up (__grid_constant__); int8 block maxima by
//   __reduce_max_sync on sm_80 and up, by shuffles on sm_70-75 (CI builds sm_90 only).
// - [Note: multi-tensor launch] The host splits every tensor into chunks of
//   kFusedOptimizerChunk elements (after a short scalar head that aligns the vector loads; int8
//   tensors have none, so chunks start on blocks) and builds a table of the tensors with their
//   first chunk index (and, for bf16 states, the rounding keys of the one or two runs of 2^32
//   shard indices the tensor touches). Lists of at most kFusedOptimizerInlineTensors
//   tensors travel in the kernel's arguments (no workspace, safe under CUDA graph
//   capture); longer ones are copied by one cudaMemcpyAsync from pageable host memory into
//   `workspace` (FusedOptimizerWorkspaceBytes), which must then stay untouched until the
//   stream passes the launch (launches on one stream may reuse it). One launch covers the
//   whole list: blocks stride over the chunks (grid-stride), threads over a chunk's elements
//   with float4 / 8 x 16-bit loads (int8: warps over its blocks).
// - LaunchFusedOptimizer only enqueues work on `stream` and returns at once with the launch
//   error; cudaErrorInvalidValue (nothing launched) for what FusedOptimizerArgsError refuses
//   (call it for the reason, in words) and for a workspace too small. An empty list or all-empty tensors launch nothing and
//   return cudaSuccess.
// - Thread-safe for distinct workspaces (no global state).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/fused_optimizer_types.h"

namespace zs::kernels {

inline constexpr size_t kFusedOptimizerChunk = 16384;       // elements per chunk (a block's work)
inline constexpr size_t kFusedOptimizerInlineTensors = 24;  // lists passed as kernel arguments
static_assert(kFusedOptimizerChunk % kFusedQuantBlock == 0, "int8 chunks hold whole blocks");

// Device workspace bytes a list of num_tensors tensors needs (0 for inline lists).
size_t FusedOptimizerWorkspaceBytes(size_t num_tensors);

cudaError_t LaunchFusedOptimizer(const FusedOptimizerHyper& hyper,
                                 const FusedOptimizerTensor* tensors, size_t num_tensors,
                                 void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace zs::kernels
