// Argument checks and descriptions shared by every backend, so that all of them reject the
// same bad calls with the same messages.
//
// Contract: pure functions. Descriptions look like
//   "all_reduce(count=1000, bf16, sum) on group 'dp' (rank 1 of 4)".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"

namespace zs {

std::string DescribeOp(const Communicator& comm, std::string_view op, size_t count, DType dtype);
std::string DescribeOp(const Communicator& comm, std::string_view op, size_t count, DType dtype,
                       ReduceOp reduce);

// Null buffers with a nonzero count; peers or roots outside [0, size); sending to oneself.
Status CheckBuffer(const Communicator& comm, std::string_view what, const void* buffer,
                   size_t count, std::string_view op);
Status CheckPeer(const Communicator& comm, int peer, std::string_view op);

// Overlapping send and recv buffers are allowed only in the in-place layout of communicator.h:
// `inner == outer + offset` (all_gather: inner = send, outer = recv, offset = rank * bytes;
// reduce_scatter: inner = recv, outer = send; all_reduce: offset 0). Any other overlap is
// InvalidArgument naming both buffers. Null or empty buffers never overlap.
// The argument checks of each collective, shared by every backend: null buffers for nonzero
// counts (CheckBuffer) and overlaps other than the in-place form of communicator.h
// (CheckInPlace). `what` is the operation's description (DescribeOp).
Status CheckAllGatherArgs(const Communicator& comm, const void* send, const void* recv,
                          size_t count, DType dtype, std::string_view what);
Status CheckReduceScatterArgs(const Communicator& comm, const void* send, const void* recv,
                              size_t count, DType dtype, std::string_view what);
Status CheckAllReduceArgs(const Communicator& comm, const void* send, const void* recv,
                          size_t count, DType dtype, std::string_view what);

Status CheckInPlace(std::string_view inner_name, const void* inner, size_t inner_bytes,
                    std::string_view outer_name, const void* outer, size_t outer_bytes,
                    size_t offset, std::string_view what);

}  // namespace zs
