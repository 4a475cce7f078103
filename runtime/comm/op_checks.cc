#include "runtime/comm/op_checks.h"

#include <fmt/format.h>

#include <cstddef>

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

}  // namespace zs
