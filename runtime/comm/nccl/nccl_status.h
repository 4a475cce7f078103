// Error translation and polling helpers shared by the nccl backend's files.
//
// Contract
// - NcclError/CudaError turn a failed ncclResult_t / cudaError_t into a Status whose message
//   is "<what>: <library error name and text>" (plus ncclGetLastError when a comm is given).
// - WaitUntilReady polls ncclCommGetAsyncError(comm) until the communicator's pending
//   non-blocking call (init, split, enqueue, finalize) finished, failed, or `deadline` passed
//   (DeadlineExceeded naming `what` and `timeout`). It blocks the calling thread, sleeping a
//   little between polls; it never aborts the comm (the caller decides).
#pragma once

#include <chrono>
#include <string_view>

#include "runtime/base/status.h"

struct ncclComm;

namespace zs {

Status NcclError(int nccl_result, ncclComm* comm, std::string_view what);
Status CudaError(int cuda_error, std::string_view what);
Status WaitUntilReady(ncclComm* comm, std::chrono::steady_clock::time_point deadline,
                      std::chrono::milliseconds timeout, std::string_view what);

}  // namespace zs
