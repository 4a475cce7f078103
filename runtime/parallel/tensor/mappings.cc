#include "runtime/parallel/tensor/mappings.h"

#include <fmt/format.h>

#include <string_view>

namespace zs::tp {
namespace {

Status CheckBlocks(std::string_view what, const Communicator& tp, size_t full, size_t local) {
  if (full != local * static_cast<size_t>(tp.size())) {
    return InvalidArgumentError(
        fmt::format("{}: the full buffer has {} floats, not tp {} x the local {} (group '{}')",
                    what, full, tp.size(), local, tp.group_name()));
  }
  return OkStatus();
}

Status AllReduceSum(std::string_view what, Communicator& tp, std::span<float> values) {
  if (tp.size() == 1) return OkStatus();
  return tp.AllReduce(values.data(), values.data(), values.size(), DType::kF32, ReduceOp::kSum)
      .WithContext(what);
}

Status AllGather(std::string_view what, Communicator& tp, std::span<const float> local,
                 std::span<float> full) {
  ZS_RETURN_IF_ERROR(CheckBlocks(what, tp, full.size(), local.size()));
  return tp.AllGather(local.data(), full.data(), local.size(), DType::kF32).WithContext(what);
}

Status ReduceScatter(std::string_view what, Communicator& tp, std::span<const float> full,
                     std::span<float> local) {
  ZS_RETURN_IF_ERROR(CheckBlocks(what, tp, full.size(), local.size()));
  return tp.ReduceScatter(full.data(), local.data(), local.size(), DType::kF32, ReduceOp::kSum)
      .WithContext(what);
}

}  // namespace

Status CopyToTpRegionBackward(Communicator& tp, std::span<float> dx) {
  return AllReduceSum("copy-to-tp-region backward", tp, dx);
}

Status ReduceFromTpRegionForward(Communicator& tp, std::span<float> y) {
  return AllReduceSum("reduce-from-tp-region forward", tp, y);
}

Status GatherFromSequenceRegionForward(Communicator& tp, std::span<const float> local,
                                       std::span<float> full) {
  return AllGather("gather-from-sequence-region forward", tp, local, full);
}

Status GatherFromSequenceRegionBackward(Communicator& tp, std::span<const float> dfull,
                                        std::span<float> dlocal) {
  return ReduceScatter("gather-from-sequence-region backward", tp, dfull, dlocal);
}

Status ReduceScatterToSequenceRegionForward(Communicator& tp, std::span<const float> full,
                                            std::span<float> local) {
  return ReduceScatter("reduce-scatter-to-sequence-region forward", tp, full, local);
}

Status ReduceScatterToSequenceRegionBackward(Communicator& tp, std::span<const float> dlocal,
                                             std::span<float> dfull) {
  return AllGather("reduce-scatter-to-sequence-region backward", tp, dlocal, dfull);
}

Status AccumulateReplicatedGrads(Communicator& tp, bool sequence_parallel, std::span<float> partial,
                                 std::initializer_list<std::span<float>> grads) {
  size_t total = 0;
  for (std::span<float> g : grads) total += g.size();
  ZS_CHECK(partial.size() == total, "partial {} floats for gradients of {}", partial.size(), total);
  if (sequence_parallel) {
    ZS_RETURN_IF_ERROR(
        AllReduceSum("sequence-parallel gradient of a replicated parameter", tp, partial));
  }
  const float* p = partial.data();
  for (std::span<float> g : grads) {
    for (float& v : g) v += *p++;
  }
  return OkStatus();
}

}  // namespace zs::tp
