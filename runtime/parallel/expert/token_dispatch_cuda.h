// PlanDispatchCuda: the dispatch plan of token_dispatch.h computed on a GPU, by the same Thrust
// template (token_dispatch_impl.h) instantiated with thrust::cuda::par. Built only when the
// build has CUDA (ZS_HAVE_CUDA; target zs_expert_cuda, in the zerostack::cuda component).
//
// Contract
// - The rule, the outputs and their meaning are PlanDispatch's (token_dispatch.h); the results
//   are identical element for element.
// - PlanDispatchCuda: every pointer is device memory of the current CUDA device, holding the
//   counts of DispatchPlan's fields (outputs.assignment: tokens * k entries, of which the first
//   offsets[E] are written). Scratch is allocated on the device for the call. Runs on the
//   default stream and blocks the calling thread until the plan is complete.
// - PlanDispatchCudaFromHost: copies expert_of to the device, plans there and copies the plan
//   back (for tests and for callers with host routing).
// - CudaDispatchAvailable: OK when a CUDA device is present; Unavailable naming the CUDA error
//   otherwise (no driver: cudaGetDeviceCount fails; no device: zero devices). The other calls
//   return the same error on such a machine.
// - Errors: those of PlanDispatch (an out-of-range choice is counted on the device and
//   reported with the count, not the position), Unavailable without a GPU, Internal for a
//   CUDA error, OutOfMemory when device scratch is refused. Thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/base/status.h"
#include "runtime/parallel/expert/token_dispatch.h"

namespace zs {

struct DeviceDispatchOutputs {
  int32_t* routed = nullptr;      // [E]
  int32_t* kept = nullptr;        // [E]
  int32_t* offsets = nullptr;     // [E + 1]
  int32_t* assignment = nullptr;  // [tokens * k]
  int32_t* slot = nullptr;        // [tokens * k]
};

Status CudaDispatchAvailable();

Status PlanDispatchCuda(const int32_t* expert_of, int64_t tokens, int k, int num_experts,
                        int64_t capacity, const DeviceDispatchOutputs& outputs);

StatusOr<DispatchPlan> PlanDispatchCudaFromHost(std::span<const int32_t> expert_of, int k,
                                                int num_experts, int64_t capacity);

}  // namespace zs
