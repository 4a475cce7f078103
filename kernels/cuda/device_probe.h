// NoCudaDeviceReason: whether this process can use a CUDA device, and why not. The one check
// behind every "skip without a GPU" in the CUDA tests and benchmarks.
//
// Contract: returns "" when cudaGetDeviceCount succeeds with at least one device, else a
// sentence naming the CUDA error or the zero count. Thread-safe; initializes the CUDA runtime.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace zs::kernels {

inline std::string NoCudaDeviceReason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(err) + " (" +
           cudaGetErrorString(err) + ")";
  }
  if (count == 0) return "cudaGetDeviceCount returned 0 devices";
  return "";
}

}  // namespace zs::kernels
