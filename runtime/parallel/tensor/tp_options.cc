#include "runtime/parallel/tensor/tp_options.h"

#include <fmt/format.h>

namespace zs::tp {

TpOptions TpOptions::Of(const Communicator& tp, bool sequence_parallel) {
  return TpOptions{.size = tp.size(), .rank = tp.rank(), .sequence_parallel = sequence_parallel};
}

Status TpOptions::Validate() const {
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgumentError(
        fmt::format("tp: rank {} is not in a group of size {}", rank, size));
  }
  return OkStatus();
}

Status TpOptions::CheckDivisible(std::string_view what, int64_t n) const {
  if (n <= 0 || n % size != 0) {
    return InvalidArgumentError(fmt::format("tp: {} {} is not divisible by tp {}", what, n, size));
  }
  return OkStatus();
}

Status TpOptions::CheckRows(int64_t rows) const {
  if (sequence_parallel && (rows <= 0 || rows % size != 0)) {
    return InvalidArgumentError(fmt::format(
        "tp: sequence parallelism splits rows (batch * seq) {} into tp {} equal blocks, and it "
        "does not divide",
        rows, size));
  }
  return OkStatus();
}

}  // namespace zs::tp
