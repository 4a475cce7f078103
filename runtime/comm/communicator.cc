#include "runtime/comm/communicator.h"

#include <fmt/format.h>

#include <cstdint>
#include <vector>

namespace zs {

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

CommHandle Communicator::StartAllToAll(const void* send, void* recv, size_t count, DType dtype) {
  const size_t n = size_t(size());
  if (count > 0 && count > SIZE_MAX / n / DTypeSize(dtype)) {
    return CommHandle::Completed(InvalidArgumentError(fmt::format(
        "all_to_all(count={}, {}) on group '{}' (rank {} of {}): {} x {} elements overflow", count,
        DTypeName(dtype), group_name(), rank(), size(), n, count)));
  }
  std::vector<size_t> counts(n, count), offsets(n);
  for (size_t p = 0; p < n; ++p) offsets[p] = p * count;
  return StartAllToAllv(send, counts, offsets, recv, counts, offsets, dtype);
}

}  // namespace zs
