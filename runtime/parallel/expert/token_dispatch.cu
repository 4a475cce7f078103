// The GPU instantiation of the dispatch template (token_dispatch_impl.h) with thrust::cuda::par
// on the default stream. The one Thrust translation unit for the GPU: keep heavy templates here.
#include <cuda_runtime.h>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/system_error.h>

#include <new>

#include "runtime/parallel/expert/token_dispatch_cuda_impl.h"
#include "runtime/parallel/expert/token_dispatch_impl.h"

namespace zs::dispatch_detail {
namespace {

CudaResult FromCuda(cudaError_t err, const char* where) {
  return {CudaOutcome::kCudaError, 0, std::string(where) + ": " + cudaGetErrorString(err)};
}

}  // namespace

CudaResult CudaDeviceCheck() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // reset the last-error state (this error is not sticky)
    return {CudaOutcome::kNoDevice, 0,
            std::string("cudaGetDeviceCount: ") + cudaGetErrorName(err) + " (" +
                cudaGetErrorString(err) + ")"};
  }
  if (count == 0) return {CudaOutcome::kNoDevice, 0, "cudaGetDeviceCount: 0 devices"};
  return {};
}

CudaResult CudaPlan(const int32_t* expert_of, int32_t tokens, int32_t k, int32_t num_experts,
                    int32_t capacity, const PlanPointers& out) {
  if (CudaResult check = CudaDeviceCheck(); check.outcome != CudaOutcome::kOk) return check;
  const int32_t n = tokens * k;
  try {
    thrust::device_vector<int32_t> sort_keys(n), sorted_assign(n), expert_begin(num_experts + 1);
    DispatchArrays d;
    d.expert_of = expert_of;
    d.tokens = tokens;
    d.k = k;
    d.num_experts = num_experts;
    d.capacity = capacity;
    d.sort_keys = thrust::raw_pointer_cast(sort_keys.data());
    d.sorted_assign = thrust::raw_pointer_cast(sorted_assign.data());
    d.expert_begin = thrust::raw_pointer_cast(expert_begin.data());
    d.routed = out.routed;
    d.kept = out.kept;
    d.offsets = out.offsets;
    d.assignment = out.assignment;
    d.slot = out.slot;
    if (const int64_t bad = CountInvalidExperts(thrust::cuda::par, d); bad > 0) {
      return {CudaOutcome::kInvalidExperts, bad, ""};
    }
    RunDispatch(thrust::cuda::par, d);
    if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
      return FromCuda(err, "dispatch plan");
    }
  } catch (const std::bad_alloc& e) {
    return {CudaOutcome::kOutOfMemory, 0, e.what()};
  } catch (const thrust::system_error& e) {
    return {CudaOutcome::kCudaError, 0, e.what()};
  }
  return {};
}

CudaResult CudaPlanFromHost(const int32_t* expert_of, int32_t tokens, int32_t k,
                            int32_t num_experts, int32_t capacity, const PlanPointers& out) {
  if (CudaResult check = CudaDeviceCheck(); check.outcome != CudaOutcome::kOk) return check;
  const int32_t n = tokens * k;
  const size_t e = size_t(num_experts);
  try {
    thrust::device_vector<int32_t> d_expert_of(expert_of, expert_of + n);
    thrust::device_vector<int32_t> routed(e), kept(e), offsets(e + 1), assignment(n), slot(n);
    const PlanPointers device{
        thrust::raw_pointer_cast(routed.data()), thrust::raw_pointer_cast(kept.data()),
        thrust::raw_pointer_cast(offsets.data()), thrust::raw_pointer_cast(assignment.data()),
        thrust::raw_pointer_cast(slot.data())};
    CudaResult result = CudaPlan(thrust::raw_pointer_cast(d_expert_of.data()), tokens, k,
                                 num_experts, capacity, device);
    if (result.outcome != CudaOutcome::kOk) return result;
    thrust::copy(routed.begin(), routed.end(), out.routed);
    thrust::copy(kept.begin(), kept.end(), out.kept);
    thrust::copy(offsets.begin(), offsets.end(), out.offsets);
    thrust::copy(assignment.begin(), assignment.end(), out.assignment);
    thrust::copy(slot.begin(), slot.end(), out.slot);
  } catch (const std::bad_alloc& e) {
    return {CudaOutcome::kOutOfMemory, 0, e.what()};
  } catch (const thrust::system_error& e) {
    return {CudaOutcome::kCudaError, 0, e.what()};
  }
  return {};
}

}  // namespace zs::dispatch_detail
