// Status and argument checks around the nvcc-compiled dispatch (token_dispatch.cu).
#include "runtime/parallel/expert/token_dispatch_cuda.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/parallel/expert/token_dispatch_cuda_impl.h"

namespace zs {
namespace {

using dispatch_detail::CudaOutcome;
using dispatch_detail::CudaResult;

Status ToStatus(const CudaResult& r, int num_experts) {
  switch (r.outcome) {
    case CudaOutcome::kOk:
      return OkStatus();
    case CudaOutcome::kNoDevice:
      return UnavailableError(fmt::format("dispatch plan on a GPU: no CUDA device ({})", r.what));
    case CudaOutcome::kInvalidExperts:
      return InvalidArgumentError(fmt::format(
          "dispatch plan on a GPU: {} expert choice(s) outside [0, {})", r.invalid, num_experts));
    case CudaOutcome::kOutOfMemory:
      return OutOfMemoryError(
          fmt::format("dispatch plan on a GPU: device scratch was refused ({})", r.what));
    case CudaOutcome::kCudaError:
      return InternalError(fmt::format("dispatch plan on a GPU: {}", r.what));
  }
  return InternalError("dispatch plan on a GPU: unknown outcome");
}

}  // namespace

Status CudaDispatchAvailable() { return ToStatus(dispatch_detail::CudaDeviceCheck(), 0); }

Status PlanDispatchCuda(const int32_t* expert_of, int64_t tokens, int k, int num_experts,
                        int64_t capacity, const DeviceDispatchOutputs& outputs) {
  if (tokens < 0) {
    return InvalidArgumentError(fmt::format("dispatch plan on a GPU: tokens={} < 0", tokens));
  }
  const size_t choices = size_t(tokens) * size_t(std::max(k, 0));
  ZS_RETURN_IF_ERROR(CheckDispatchArgs(choices, k, num_experts, capacity));
  const dispatch_detail::PlanPointers out{outputs.routed, outputs.kept, outputs.offsets,
                                          outputs.assignment, outputs.slot};
  return ToStatus(dispatch_detail::CudaPlan(expert_of, int32_t(tokens), k, num_experts,
                                            int32_t(std::min<int64_t>(capacity, choices)), out),
                  num_experts);
}

StatusOr<DispatchPlan> PlanDispatchCudaFromHost(std::span<const int32_t> expert_of, int k,
                                                int num_experts, int64_t capacity) {
  ZS_RETURN_IF_ERROR(CheckDispatchArgs(expert_of.size(), k, num_experts, capacity));
  const size_t n = expert_of.size();
  DispatchPlan plan = DispatchPlan::Sized(n, k, num_experts, capacity);
  plan.assignment.resize(n);  // the GPU writes every candidate row; trimmed to rows() below
  const dispatch_detail::PlanPointers out{plan.routed.data(), plan.kept.data(), plan.offsets.data(),
                                          plan.assignment.data(), plan.slot.data()};
  ZS_RETURN_IF_ERROR(ToStatus(
      dispatch_detail::CudaPlanFromHost(expert_of.data(), int32_t(plan.tokens), k, num_experts,
                                        int32_t(std::min<int64_t>(capacity, int64_t(n))), out),
      num_experts));
  plan.assignment.resize(size_t(plan.offsets.back()));
  return plan;
}

}  // namespace zs
