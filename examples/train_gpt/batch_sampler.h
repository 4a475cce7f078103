// BatchSampler: which text windows the train_gpt demo trains on, step by step.
//
// Contract
// - The data order depends only on the seed and the global batch G (= micro_batch B x
//   accumulation_steps GA x world_size W), so runs that differ only in how that batch is split
//   see the same samples in every step. This is what lets a 4-rank ZeRO run be compared with a
//   1-rank run loss for loss.
// - Sample(step, i) is the start offset of global sequence i (0 <= i < G) of `step`: a
//   counter-based hash (splitmix64 of seed, step and i) mapped without bias onto
//   [0, n - T - 1], where n is the number of tokens and T the sequence length. The sequence's
//   inputs are tokens[start, start + T) and its targets tokens[start + 1, start + T + 1). There
//   is no state: any (step, i) can be asked in any order, from any thread, on any rank.
// - Assignment of global indices to (rank r, micro-step m, row b) of a split (W, B, GA):
//       i = (m * W + r) * B + b,   0 <= m < GA, 0 <= r < W, 0 <= b < B.
//   Every split with W * B * GA == G covers each i in [0, G) exactly once, so the set of
//   samples of a step is the same for every split (only which rank sees which differs).
// - The sampler does not own the tokens: the span passed to Create must outlive it. It is an
//   immutable value, safe to share between threads. Nothing blocks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/base/status.h"

namespace zs {

// How a global batch is split: W ranks, each running GA micro-steps of B sequences per step.
struct BatchSplit {
  int world_size = 1;          // W
  int micro_batch = 1;         // B: sequences per rank per micro-step
  int accumulation_steps = 1;  // GA: micro-steps per optimizer step

  int64_t global_batch() const {
    return static_cast<int64_t>(world_size) * micro_batch * accumulation_steps;
  }
};

class BatchSampler {
 public:
  // INVALID_ARGUMENT naming the values unless 1 <= seq_len < tokens.size() and
  // global_batch >= 1.
  static StatusOr<BatchSampler> Create(std::span<const int32_t> tokens, int64_t seq_len,
                                       uint64_t seed, int64_t global_batch);

  // Start offset of global sequence `global_index` of `step`, in [0, num_starts()).
  // 0 <= global_index < global_batch() and step >= 0 are checked (ZS_CHECK: programmer bugs).
  int64_t Sample(int64_t step, int64_t global_index) const;

  // The global index of row b of rank r's micro-step m under `split` (see the contract).
  // Arguments are not validated here; ValidateSplit and FillMicroBatch do that.
  static int64_t GlobalIndex(const BatchSplit& split, int rank, int micro_step, int row) {
    return (static_cast<int64_t>(micro_step) * split.world_size + rank) * split.micro_batch + row;
  }

  // OK iff split's sizes are >= 1 and multiply to global_batch(); otherwise INVALID_ARGUMENT
  // naming W, B, GA and G.
  Status ValidateSplit(const BatchSplit& split) const;

  // The B start offsets of rank `rank`'s micro-step `micro_step` of `step`, row by row.
  // INVALID_ARGUMENT naming the values for a bad split, rank outside [0, W), micro_step outside
  // [0, GA) or step < 0.
  StatusOr<std::vector<int64_t>> MicroBatchStarts(int64_t step, const BatchSplit& split, int rank,
                                                  int micro_step) const;

  // Fills the row-major [B, T] `inputs` and `targets` of that micro-batch: row b holds
  // tokens[s, s + T) and tokens[s + 1, s + T + 1) for s = MicroBatchStarts(...)[b]. Both spans
  // must hold exactly B * T values (INVALID_ARGUMENT naming the sizes otherwise), plus the
  // errors of MicroBatchStarts. Nothing is written on error.
  Status FillMicroBatch(int64_t step, const BatchSplit& split, int rank, int micro_step,
                        std::span<int32_t> inputs, std::span<int32_t> targets) const;

  int64_t seq_len() const { return seq_len_; }
  uint64_t seed() const { return seed_; }
  int64_t global_batch() const { return global_batch_; }
  // Number of possible start offsets: n - T (starts are 0 .. n - T - 1).
  int64_t num_starts() const { return static_cast<int64_t>(tokens_.size()) - seq_len_; }
  std::span<const int32_t> tokens() const { return tokens_; }

 private:
  BatchSampler(std::span<const int32_t> tokens, int64_t seq_len, uint64_t seed,
               int64_t global_batch)
      : tokens_(tokens), seq_len_(seq_len), seed_(seed), global_batch_(global_batch) {}

  std::span<const int32_t> tokens_;
  int64_t seq_len_;
  uint64_t seed_;
  int64_t global_batch_;
};

}  // namespace zs
