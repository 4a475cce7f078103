#include "runtime/parallel/tensor/vocab_parallel_embedding.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/nn/embedding.h"
#include "runtime/parallel/tensor/mappings.h"

namespace zs::tp {

int64_t PaddedVocab(int64_t vocab, int tp) { return (vocab + tp - 1) / tp * tp; }

StatusOr<VocabParallelEmbedding> VocabParallelEmbedding::Create(int unit, int param, int64_t vocab,
                                                                int64_t dim, const TpOptions& tp) {
  ZS_RETURN_IF_ERROR(tp.Validate());
  if (vocab <= 0 || dim <= 0) {
    return InvalidArgumentError(
        fmt::format("tp: vocabulary-parallel embedding of vocab {} x dim {}", vocab, dim));
  }
  return VocabParallelEmbedding(unit, param, vocab, dim, tp);
}

VocabParallelEmbedding::VocabParallelEmbedding(int unit, int param, int64_t vocab, int64_t dim,
                                               const TpOptions& tp)
    : unit_(unit), param_(param), vocab_(vocab), dim_(dim), tp_(tp) {}

std::vector<TpModuleParam> VocabParallelEmbedding::params(std::string_view prefix) const {
  const nn::ModuleParam full = nn::Embedding(unit_, param_, vocab_, dim_).params(prefix)[0];
  return {MakeTpParam(full, TpParamLayout::SplitRows({vocab_, dim_}, 1, padded_vocab()), tp_.size)};
}

Status VocabParallelEmbedding::Forward(UnitAccess& access, Communicator& tp,
                                       std::span<const int32_t> ids, TpScratch& scratch,
                                       float* y) const {
  const int64_t rows = static_cast<int64_t>(ids.size());
  ZS_RETURN_IF_ERROR(tp_.CheckRows(rows));
  const int64_t start = vocab_start(), end = start + local_vocab();
  const float* table = access.Param(unit_, param_).data();
  float* partial = y;  // this rank's lookups, zero rows for tokens of other shards
  if (tp_.sequence_parallel) {
    partial = scratch.Full(rows * dim_);
  }
  for (int64_t i = 0; i < rows; ++i) {
    const int32_t id = ids[i];
    ZS_CHECK(id >= 0 && id < vocab_, "embedding id {} at {} is not in [0, {})", id, i, vocab_);
    float* out = partial + i * dim_;
    if (id >= start && id < end) {
      std::copy_n(table + (id - start) * dim_, dim_, out);
    } else {
      std::fill(out, out + dim_, 0.0f);
    }
  }
  if (tp_.sequence_parallel) {
    return ReduceScatterToSequenceRegionForward(
        tp, std::span(partial, static_cast<size_t>(rows * dim_)),
        std::span(y, static_cast<size_t>(tp_.local_rows(rows) * dim_)));
  }
  return ReduceFromTpRegionForward(tp, std::span(y, static_cast<size_t>(rows * dim_)));
}

Status VocabParallelEmbedding::Backward(UnitAccess& access, Communicator& tp,
                                        std::span<const int32_t> ids, const float* dy,
                                        TpScratch& scratch) const {
  const int64_t rows = static_cast<int64_t>(ids.size());
  ZS_RETURN_IF_ERROR(tp_.CheckRows(rows));
  if (tp_.sequence_parallel) {  // every rank needs every row's gradient for its shard's tokens
    float* dy_full = scratch.Full(rows * dim_);
    ZS_RETURN_IF_ERROR(ReduceScatterToSequenceRegionBackward(
        tp, std::span(dy, static_cast<size_t>(tp_.local_rows(rows) * dim_)),
        std::span(dy_full, static_cast<size_t>(rows * dim_))));
    dy = dy_full;
  }
  const int64_t start = vocab_start(), end = start + local_vocab();
  float* grad = access.Grad(unit_, param_).data();
  for (int64_t i = 0; i < rows; ++i) {
    const int32_t id = ids[i];
    if (id < start || id >= end) continue;
    float* row = grad + (id - start) * dim_;
    const float* dyi = dy + i * dim_;
    for (int64_t j = 0; j < dim_; ++j) row[j] += dyi[j];
  }
  return OkStatus();
}

}  // namespace zs::tp
