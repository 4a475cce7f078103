// The boundary between token_dispatch_cuda.cc (C++ compiler: Status, argument checks) and
// token_dispatch.cu (nvcc: Thrust and the CUDA runtime only, no runtime/ headers, as kernels/
// leaves are). Private to those two files (not installed: *_impl.h).
//
// Contract: arguments are already checked (token_dispatch_cuda.cc); n = tokens * k fits int32
// and capacity <= n. Each call blocks until its device work is done and reports how it ended.
#pragma once

#include <cstdint>
#include <string>

namespace zs::dispatch_detail {

enum class CudaOutcome : uint8_t { kOk, kNoDevice, kInvalidExperts, kOutOfMemory, kCudaError };

struct CudaResult {
  CudaOutcome outcome = CudaOutcome::kOk;
  int64_t invalid = 0;  // kInvalidExperts: how many choices lie outside [0, E)
  std::string what;     // the CUDA or Thrust error text
};

// Pointers to the plan's arrays, all in one memory space (the call says which).
struct PlanPointers {
  int32_t* routed;
  int32_t* kept;
  int32_t* offsets;
  int32_t* assignment;
  int32_t* slot;
};

CudaResult CudaDeviceCheck();
// expert_of and out: device memory.
CudaResult CudaPlan(const int32_t* expert_of, int32_t tokens, int32_t k, int32_t num_experts,
                    int32_t capacity, const PlanPointers& out);
// expert_of and out: host memory; copied to and from the device around CudaPlan.
CudaResult CudaPlanFromHost(const int32_t* expert_of, int32_t tokens, int32_t k,
                            int32_t num_experts, int32_t capacity, const PlanPointers& out);

}  // namespace zs::dispatch_detail
