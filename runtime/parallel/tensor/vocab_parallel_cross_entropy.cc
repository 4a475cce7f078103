#include "runtime/parallel/tensor/vocab_parallel_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/nn/softmax_kernels.h"
#include "runtime/parallel/tensor/vocab_parallel_embedding.h"

namespace zs::tp {

VocabShard VocabShard::Of(int64_t vocab, int tp, int rank) {
  const int64_t size = PaddedVocab(vocab, tp) / tp;
  return {vocab, rank * size, size};
}

int64_t VocabShard::valid() const { return std::clamp<int64_t>(vocab - start, 0, size); }

StatusOr<double> VocabParallelCrossEntropyForward(Communicator& tp, const float* logits,
                                                  std::span<const int32_t> targets,
                                                  const VocabShard& shard, float* probs) {
  const int64_t rows = static_cast<int64_t>(targets.size()), n = shard.size;
  const int64_t valid = shard.valid();
  std::vector<float> max(rows);
  std::vector<float> sums(2 * rows);  // [sum of exp] then [target logit]
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t target = targets[r];
    ZS_CHECK(target >= 0 && target < shard.vocab, "target {} at row {} is not in [0, {})", target,
             r, shard.vocab);
    const float* l = logits + r * n;
    max[r] = nn::RowMax(l, valid);  // -infinity for a shard of padding only
    const int64_t local_target = target - shard.start;
    sums[rows + r] = local_target >= 0 && local_target < valid ? l[local_target] : 0.0f;
  }
  const size_t count = static_cast<size_t>(rows);
  ZS_RETURN_IF_ERROR(tp.AllReduce(max.data(), max.data(), count, DType::kF32, ReduceOp::kMax)
                         .WithContext("vocab-parallel cross-entropy: row max"));
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits + r * n;
    float* p = probs + r * n;
    const double sum = nn::ExpShifted(l, valid, max[r], p);
    std::fill(p + valid, p + n, 0.0f);
    sums[r] = static_cast<float>(sum);
  }
  ZS_RETURN_IF_ERROR(tp.AllReduce(sums.data(), sums.data(), 2 * count, DType::kF32, ReduceOp::kSum)
                         .WithContext("vocab-parallel cross-entropy: sum of exp and target logit"));
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    total += static_cast<double>(max[r]) + std::log(static_cast<double>(sums[r])) -
             static_cast<double>(sums[rows + r]);
    nn::ScaleRow(probs + r * n, valid, 1.0f / sums[r]);
  }
  return rows == 0 ? 0.0 : total / static_cast<double>(rows);
}

void VocabParallelCrossEntropyBackward(const float* probs, std::span<const int32_t> targets,
                                       const VocabShard& shard, float seed, float* dlogits) {
  if (targets.empty()) return;
  const int64_t n = shard.size;
  const float scale = seed / static_cast<float>(targets.size());
  for (size_t r = 0; r < targets.size(); ++r) {
    const float* p = probs + static_cast<int64_t>(r) * n;
    float* d = dlogits + static_cast<int64_t>(r) * n;
    for (int64_t j = 0; j < n; ++j) d[j] = scale * p[j];
    const int64_t local_target = targets[r] - shard.start;
    if (local_target >= 0 && local_target < n) d[local_target] -= scale;
  }
}

}  // namespace zs::tp
