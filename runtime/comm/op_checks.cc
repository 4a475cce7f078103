#include "runtime/comm/op_checks.h"

#include <fmt/format.h>

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

}  // namespace zs
