// The `nccl` communication backend: one rank per CUDA device, collectives run by NCCL on the
// communicator's own CUDA stream. Buffers are device memory.
//
// Contract
// - MakeNcclBackend() returns the factory registered as "nccl" (via ZS_COMM_OPTIONAL_BACKENDS;
//   built only when CMake found NCCL beside the CUDA toolkit, and registered by
//   RegisterBuiltinBackends() only in programs that link zs_comm_nccl, zerostack::nccl). Available() is Unavailable, with the
//   CUDA error, when cudaGetDeviceCount fails (no driver: error 35) or finds no device.
// - Connect(store, rank, world, options) is collective: rank 0 creates an ncclUniqueId and
//   sets it under "zs/nccl/<group>/w<world>/g<gen>/unique_id" (gen = how many times this rank
//   of this process connected that group before, so repeated Connects do not collide); the
//   others Get it. Each rank uses device rank % cudaGetDeviceCount() (one rank per device:
//   NCCL refuses two ranks of one communicator on one device). The communicator is created
//   non-blocking (ncclCommInitRankConfig with blocking = 0), so its initialisation is polled
//   and, past options.timeout, aborted (ncclCommAbort) with DeadlineExceeded naming the
//   group, the rank and the device. Connect blocks the calling thread until then.
// - The communicators follow communicator.h except for the determinism clause; see
//   [Note: nccl determinism] in nccl_communicator.h.
#pragma once

#include <memory>

#include "runtime/comm/backend_registry.h"

namespace zs {

std::unique_ptr<Backend> MakeNcclBackend();

}  // namespace zs
