#include "runtime/comm/op_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>

namespace zs {

std::string DescribeOp(const Communicator& comm, std::string_view op, size_t count, DType dtype) {
  return fmt::format("{}(count={}, {}) on group '{}' (rank {} of {})", op, count,
                     DTypeName(dtype), comm.group_name(), comm.rank(), comm.size());
}

std::string DescribeOp(const Communicator& comm, std::string_view op, size_t count, DType dtype,
                       ReduceOp reduce) {
  return fmt::format("{}(count={}, {}, {}) on group '{}' (rank {} of {})", op, count,
                     DTypeName(dtype), ReduceOpName(reduce), comm.group_name(), comm.rank(),
                     comm.size());
}

Status CheckBuffer(const Communicator& comm, std::string_view what, const void* buffer,
                   size_t count, std::string_view op) {
  if (buffer == nullptr && count > 0) {
    return InvalidArgumentError(fmt::format("{} on group '{}' (rank {}): {} buffer is null for "
                                            "count {}",
                                            op, comm.group_name(), comm.rank(), what, count));
  }
  return OkStatus();
}

Status CheckPeer(const Communicator& comm, int peer, std::string_view op) {
  if (peer < 0 || peer >= comm.size()) {
    return InvalidArgumentError(fmt::format("{} on group '{}' (rank {}): rank {} is not in [0, {})",
                                            op, comm.group_name(), comm.rank(), peer,
                                            comm.size()));
  }
  return OkStatus();
}

Status CheckInPlace(std::string_view inner_name, const void* inner, size_t inner_bytes,
                    std::string_view outer_name, const void* outer, size_t outer_bytes,
                    size_t offset, std::string_view what) {
  if (inner == nullptr || outer == nullptr || inner_bytes == 0 || outer_bytes == 0) {
    return OkStatus();
  }
  const auto* in = static_cast<const std::byte*>(inner);
  const auto* out = static_cast<const std::byte*>(outer);
  const bool overlap = in < out + outer_bytes && out < in + inner_bytes;
  if (!overlap || in == out + offset) return OkStatus();
  return InvalidArgumentError(fmt::format("{}: {} buffer {} overlaps {} buffer {} but is not the "
                                          "in-place block ({} + {} bytes)",
                                          what, inner_name, inner, outer_name, outer, outer_name,
                                          offset));
}

Status CheckAllGatherArgs(const Communicator& comm, const void* send, const void* recv,
                          size_t count, DType dtype, std::string_view what) {
  const size_t bytes = count * DTypeSize(dtype), n = size_t(comm.size());
  ZS_RETURN_IF_ERROR(CheckBuffer(comm, "send", send, count, what));
  ZS_RETURN_IF_ERROR(CheckBuffer(comm, "recv", recv, count * n, what));
  // In place: send == recv + rank * count.
  return CheckInPlace("send", send, bytes, "recv", recv, bytes * n, bytes * comm.rank(), what);
}

Status CheckReduceScatterArgs(const Communicator& comm, const void* send, const void* recv,
                              size_t count, DType dtype, std::string_view what) {
  const size_t bytes = count * DTypeSize(dtype), n = size_t(comm.size());
  ZS_RETURN_IF_ERROR(CheckBuffer(comm, "send", send, count * n, what));
  ZS_RETURN_IF_ERROR(CheckBuffer(comm, "recv", recv, count, what));
  // In place: recv == send + rank * count.
  return CheckInPlace("recv", recv, bytes, "send", send, bytes * n, bytes * comm.rank(), what);
}

Status CheckAllReduceArgs(const Communicator& comm, const void* send, const void* recv,
                          size_t count, DType dtype, std::string_view what) {
  const size_t bytes = count * DTypeSize(dtype);
  ZS_RETURN_IF_ERROR(CheckBuffer(comm, "send", send, count, what));
  ZS_RETURN_IF_ERROR(CheckBuffer(comm, "recv", recv, count, what));
  return CheckInPlace("send", send, bytes, "recv", recv, bytes, 0, what);  // in place: equal
}

size_t AllToAllLayout::send_total() const {
  return std::accumulate(send_counts.begin(), send_counts.end(), size_t{0});
}
size_t AllToAllLayout::recv_total() const {
  return std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
}

std::string DescribeAllToAll(const Communicator& comm, const AllToAllLayout& layout, DType dtype) {
  return fmt::format("all_to_all_v(send={}, recv={}, {}) on group '{}' (rank {} of {})",
                     layout.send_total(), layout.recv_total(), DTypeName(dtype), comm.group_name(),
                     comm.rank(), comm.size());
}

Status AllToAllCountMismatch(std::string_view what, std::string_view group, int sender, size_t sent,
                             int receiver, size_t expected) {
  return InvalidArgumentError(fmt::format(
      "{}: mismatched all_to_all counts on group '{}': rank {} sends {} elements to rank {}, "
      "which expects {} from rank {}",
      what, group, sender, sent, receiver, expected, sender));
}

namespace {

// One peer's nonempty range of a buffer, in bytes.
struct Range {
  uintptr_t begin, end;
  int peer;
};

}  // namespace

Status CheckAllToAllArgs(const Communicator& comm, const void* send, const void* recv,
                         const AllToAllLayout& layout, DType dtype, std::string_view what) {
  const size_t n = size_t(comm.size()), esize = DTypeSize(dtype);
  const struct {
    const char* name;
    const std::vector<size_t>& values;
  } spans[] = {{"send_counts", layout.send_counts},
               {"send_offsets", layout.send_offsets},
               {"recv_counts", layout.recv_counts},
               {"recv_offsets", layout.recv_offsets}};
  for (const auto& span : spans) {
    if (span.values.size() != n) {
      return InvalidArgumentError(fmt::format("{}: {} has {} entries, expected one per rank ({})",
                                              what, span.name, span.values.size(), n));
    }
  }
  // Ranges in bytes; offset + count must not overflow.
  auto ranges = [&](const char* side, const void* base, const std::vector<size_t>& counts,
                    const std::vector<size_t>& offsets, std::vector<Range>* out) -> Status {
    size_t total = 0;
    for (size_t p = 0; p < n; ++p) {
      const size_t limit = SIZE_MAX / esize;
      if (counts[p] > limit || offsets[p] > limit - counts[p] ||
          (offsets[p] + counts[p]) * esize > SIZE_MAX - uintptr_t(base)) {
        return InvalidArgumentError(fmt::format(
            "{}: {}_offsets[{}] = {} + {}_counts[{}] = {} elements of {} overflow the address "
            "space",
            what, side, p, offsets[p], side, p, counts[p], DTypeName(dtype)));
      }
      total += counts[p];
      if (counts[p] == 0) continue;
      const uintptr_t begin = uintptr_t(base) + offsets[p] * esize;
      out->push_back(Range{begin, begin + counts[p] * esize, int(p)});
    }
    if (base == nullptr && total > 0) {
      return InvalidArgumentError(
          fmt::format("{}: {} buffer is null for {} elements in all", what, side, total));
    }
    return OkStatus();
  };
  std::vector<Range> sends, recvs;
  ZS_RETURN_IF_ERROR(ranges("send", send, layout.send_counts, layout.send_offsets, &sends));
  ZS_RETURN_IF_ERROR(ranges("recv", recv, layout.recv_counts, layout.recv_offsets, &recvs));
  const size_t me = size_t(comm.rank());
  if (layout.send_counts[me] != layout.recv_counts[me]) {
    return AllToAllCountMismatch(what, comm.group_name(), comm.rank(), layout.send_counts[me],
                                 comm.rank(), layout.recv_counts[me]);
  }
  // Recv ranges sorted by start must not overlap each other; then each send range is tested
  // against the recv range that ends first after its start (the recv ends are sorted too).
  auto by_begin = [](const Range& a, const Range& b) { return a.begin < b.begin; };
  std::sort(recvs.begin(), recvs.end(), by_begin);
  for (size_t i = 1; i < recvs.size(); ++i) {
    const Range &a = recvs[i - 1], &b = recvs[i];
    if (b.begin < a.end) {
      return InvalidArgumentError(fmt::format(
          "{}: the recv ranges from rank {} (elements [{}, {})) and rank {} (elements [{}, {})) "
          "overlap",
          what, a.peer, layout.recv_offsets[a.peer],
          layout.recv_offsets[a.peer] + layout.recv_counts[a.peer], b.peer,
          layout.recv_offsets[b.peer], layout.recv_offsets[b.peer] + layout.recv_counts[b.peer]));
    }
  }
  for (const Range& s : sends) {
    auto it = std::upper_bound(recvs.begin(), recvs.end(), s.begin,
                               [](uintptr_t x, const Range& r) { return x < r.end; });
    if (it != recvs.end() && it->begin < s.end) {
      return InvalidArgumentError(fmt::format(
          "{}: send and recv overlap (in-place all_to_all is not supported): the send range to "
          "rank {} ({} elements at {}) overlaps the recv range from rank {} ({} elements at {})",
          what, s.peer, layout.send_counts[s.peer], reinterpret_cast<const void*>(s.begin),
          it->peer, layout.recv_counts[it->peer], reinterpret_cast<const void*>(it->begin)));
    }
  }
  return OkStatus();
}

}  // namespace zs
