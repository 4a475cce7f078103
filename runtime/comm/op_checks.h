// Argument checks and descriptions shared by every backend, so that all of them reject the
// same bad calls with the same messages.
//
// Contract: pure functions. Descriptions look like
//   "all_reduce(count=1000, bf16, sum) on group 'dp' (rank 1 of 4)".
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

// The per-peer counts and element offsets of one all-to-all, copied from the caller's spans.
struct AllToAllLayout {
  std::vector<size_t> send_counts, send_offsets, recv_counts, recv_offsets;

  AllToAllLayout() = default;
  AllToAllLayout(std::span<const size_t> sc, std::span<const size_t> so, std::span<const size_t> rc,
                 std::span<const size_t> ro)
      : send_counts(sc.begin(), sc.end()),
        send_offsets(so.begin(), so.end()),
        recv_counts(rc.begin(), rc.end()),
        recv_offsets(ro.begin(), ro.end()) {}
  size_t send_total() const;  // sum of send_counts
  size_t recv_total() const;  // sum of recv_counts
};

// "all_to_all_v(send=12, recv=10, bf16) on group 'ep' (rank 1 of 4)": the element totals.
std::string DescribeAllToAll(const Communicator& comm, const AllToAllLayout& layout, DType dtype);

// The checks of communicator.h's all-to-all that one rank can make, InvalidArgument naming the
// values: a span without size() entries; offset + count (in bytes) overflowing; a null buffer
// with a nonzero total; two nonempty recv ranges overlapping (naming both peers); a send range
// overlapping a recv range (naming both peers); send_counts[rank] != recv_counts[rank].
Status CheckAllToAllArgs(const Communicator& comm, const void* send, const void* recv,
                         const AllToAllLayout& layout, DType dtype, std::string_view what);

// The error of a count that differs between two ranks: rank `sender` sends `sent` elements to
// rank `receiver`, which expects `expected` from it.
Status AllToAllCountMismatch(std::string_view what, std::string_view group, int sender, size_t sent,
                             int receiver, size_t expected);

Status CheckInPlace(std::string_view inner_name, const void* inner, size_t inner_bytes,
                    std::string_view outer_name, const void* outer, size_t outer_bytes,
                    size_t offset, std::string_view what);

}  // namespace zs
