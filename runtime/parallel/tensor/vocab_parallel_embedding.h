// VocabParallelEmbedding: nn::Embedding's table split over the tp group by vocabulary rows
// (Megatron). The vocabulary V is padded up to Vp, a multiple of tp (padded rows are zero and
// no token ever reads them); rank r holds rows [r*Vp/tp, (r+1)*Vp/tp) (tensor_parallel). Each
// rank looks up the tokens inside its shard and writes zero rows for the others; the partial
// results leave the tp region through reduce-from-tp-region (all-reduce) or, with sequence
// parallelism, reduce-scatter-to-sequence-region (each rank gets its row block).
//
// Contract
// - Owns no parameters: the shard [Vp/tp, dim] is param `param` of unit `unit`, read inside the
//   caller's bracket.
// - ids: every row's token, [rows] (the same on every tp rank). Ids outside [0, V) are a
//   ZS_CHECK failure (models validate user tokens before any bracket opens, as nn::Embedding).
//   y [local_rows, dim] (tp_options.h) is overwritten. Backward takes dy [local_rows, dim] and
//   accumulates (+=) into the rows of the shard its tokens hit; padded rows get nothing.
// - No activations: the caller keeps ids; the collectives work in the caller's TpScratch.
// - Blocks the calling thread in the tp collectives; every tp rank calls in the same order.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/unit_access.h"
#include "runtime/parallel/tensor/tp_options.h"
#include "runtime/parallel/tensor/tp_param_layout.h"
#include "runtime/parallel/tensor/tp_scratch.h"

namespace zs::tp {

// V rounded up to a multiple of tp.
int64_t PaddedVocab(int64_t vocab, int tp);

class VocabParallelEmbedding {
 public:
  // InvalidArgument for a non-positive vocab or dim.
  static StatusOr<VocabParallelEmbedding> Create(int unit, int param, int64_t vocab, int64_t dim,
                                                 const TpOptions& tp);

  int num_params() const { return 1; }
  // nn::Embedding's "<prefix>weight" as a shard [Vp/tp, dim] of the padded table.
  std::vector<TpModuleParam> params(std::string_view prefix) const;

  int64_t vocab() const { return vocab_; }
  int64_t padded_vocab() const { return PaddedVocab(vocab_, tp_.size); }
  int64_t local_vocab() const { return padded_vocab() / tp_.size; }
  int64_t vocab_start() const { return tp_.rank * local_vocab(); }

  Status Forward(UnitAccess& access, Communicator& tp, std::span<const int32_t> ids,
                 TpScratch& scratch, float* y) const;
  Status Backward(UnitAccess& access, Communicator& tp, std::span<const int32_t> ids,
                  const float* dy, TpScratch& scratch) const;

 private:
  VocabParallelEmbedding(int unit, int param, int64_t vocab, int64_t dim, const TpOptions& tp);

  int unit_;
  int param_;
  int64_t vocab_;
  int64_t dim_;
  TpOptions tp_;
};

}  // namespace zs::tp
