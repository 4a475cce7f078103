// Vocabulary-parallel cross-entropy (Megatron): the mean over rows of
// -log softmax(logits[row])[target[row]] when each tp rank holds only its columns of the
// logits, [rows, Vp/tp] of the padded vocabulary (vocab_parallel_embedding.h). No rank ever
// holds a full row of logits:
//   m   = max over the group of each rank's row max            (all-reduce kMax, rows floats)
//   s   = sum over the group of sum_j exp(l_j - m)             (one all-reduce kSum of 2 * rows
//   l_t = the target's logit from the rank that holds it        floats: s and l_t together)
//   loss_row = m + log(s) - l_t;   softmax_j = exp(l_j - m) / s on each rank's own columns.
// Padded vocabulary columns (index >= V) are excluded: they take no part in m or s, and their
// probability and gradient are zero.
//
// Contract
// - Plain functions on caller-owned buffers; no parameters, no state. The forward blocks the
//   calling thread in two tp all-reduces (every tp rank calls, with the same targets) and
//   allocates 3 * rows floats of scratch; the backward is local (no communication).
// - VocabParallelCrossEntropyForward writes this rank's columns of softmax(logits) into probs
//   [rows, shard.size] (probs may alias logits) and returns the mean loss, the same bits on
//   every tp rank. Targets outside [0, V) are a ZS_CHECK failure: models validate input first.
// - VocabParallelCrossEntropyBackward writes dlogits = seed * (probs - onehot(target)) / rows on
//   this rank's columns (overwrites; may alias probs); seed as in nn::CrossEntropyBackward.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"

namespace zs::tp {

// The columns of the padded vocabulary one tp rank holds.
struct VocabShard {
  int64_t vocab = 0;  // V, unpadded
  int64_t start = 0;  // first column of this rank: rank * size
  int64_t size = 0;   // columns per rank: Vp / tp
  // Rank `rank`'s shard of V padded to a multiple of tp.
  static VocabShard Of(int64_t vocab, int tp, int rank);
  // Columns of this shard inside [0, V) (the rest is padding).
  int64_t valid() const;
};

StatusOr<double> VocabParallelCrossEntropyForward(Communicator& tp, const float* logits,
                                                  std::span<const int32_t> targets,
                                                  const VocabShard& shard, float* probs);
void VocabParallelCrossEntropyBackward(const float* probs, std::span<const int32_t> targets,
                                       const VocabShard& shard, float seed, float* dlogits);

}  // namespace zs::tp
