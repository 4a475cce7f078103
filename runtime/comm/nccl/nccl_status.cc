#include "runtime/comm/nccl/nccl_status.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <thread>

namespace zs {

Status NcclError(int nccl_result, ncclComm* comm, std::string_view what) {
  const auto r = static_cast<ncclResult_t>(nccl_result);
  const char* last = comm != nullptr ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  std::string message = fmt::format("{}: NCCL error {} ({})", what, int(r), ncclGetErrorString(r));
  if (last != nullptr && last[0] != '\0') message += fmt::format(": {}", last);
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return InvalidArgumentError(std::move(message));
    case ncclRemoteError:
      return UnavailableError(std::move(message));
    default:
      return InternalError(std::move(message));
  }
}

Status CudaError(int cuda_error, std::string_view what) {
  const auto e = static_cast<cudaError_t>(cuda_error);
  return InternalError(fmt::format("{}: CUDA error {} {} ({})", what, int(e), cudaGetErrorName(e),
                                   cudaGetErrorString(e)));
}

Status WaitUntilReady(ncclComm* comm, std::chrono::steady_clock::time_point deadline,
                      std::chrono::milliseconds timeout, std::string_view what) {
  auto sleep = std::chrono::microseconds(20);
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return NcclError(r, comm, what);
    if (state == ncclSuccess) return OkStatus();
    if (state != ncclInProgress) return NcclError(state, comm, what);
    if (std::chrono::steady_clock::now() >= deadline) {
      return DeadlineExceededError(
          fmt::format("{} did not complete within {} ms", what, timeout.count()));
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(2000));
  }
}

}  // namespace zs
