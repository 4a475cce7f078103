#include "examples/train_gpt/batch_sampler.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/base/splitmix64.h"

namespace zs {
namespace {

// A uniform value in [0, bound) from the stream SplitMix64(h), SplitMix64^2(h), ... using
// Lemire's multiply-shift with rejection (no modulo bias; almost always one draw).
uint64_t UniformBelow(uint64_t h, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  while (true) {
    h = SplitMix64(h);
    const unsigned __int128 product = static_cast<unsigned __int128>(h) * bound;
    if (static_cast<uint64_t>(product) >= threshold) {
      return static_cast<uint64_t>(product >> 64);
    }
  }
}

}  // namespace

StatusOr<BatchSampler> BatchSampler::Create(std::span<const int32_t> tokens, int64_t seq_len,
                                            uint64_t seed, int64_t global_batch) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (seq_len < 1) {
    return InvalidArgumentError(fmt::format("BatchSampler: seq_len {} must be >= 1", seq_len));
  }
  if (seq_len >= n) {
    return InvalidArgumentError(fmt::format(
        "BatchSampler: seq_len {} needs at least {} tokens (inputs and shifted targets), the "
        "text has {}",
        seq_len, seq_len + 1, n));
  }
  if (global_batch < 1) {
    return InvalidArgumentError(
        fmt::format("BatchSampler: global_batch {} must be >= 1", global_batch));
  }
  return BatchSampler(tokens, seq_len, seed, global_batch);
}

int64_t BatchSampler::Sample(int64_t step, int64_t global_index) const {
  ZS_CHECK(step >= 0, "BatchSampler::Sample: step {} < 0", step);
  ZS_CHECK(global_index >= 0 && global_index < global_batch_,
           "BatchSampler::Sample: global_index {} outside [0, {})", global_index, global_batch_);
  // Chained rather than summed so that (step, index) pairs never collide by arithmetic.
  uint64_t h = SplitMix64(seed_);
  h = SplitMix64(h ^ static_cast<uint64_t>(step));
  h = h ^ static_cast<uint64_t>(global_index);
  return static_cast<int64_t>(UniformBelow(h, static_cast<uint64_t>(num_starts())));
}

Status BatchSampler::ValidateSplit(const BatchSplit& split) const {
  // In 128 bits: three ints multiply past int64 only when the split is nonsense anyway.
  const __int128 product =
      static_cast<__int128>(split.world_size) * split.micro_batch * split.accumulation_steps;
  if (split.world_size < 1 || split.micro_batch < 1 || split.accumulation_steps < 1 ||
      product != global_batch_) {
    return InvalidArgumentError(fmt::format(
        "BatchSampler: split world_size {} x micro_batch {} x accumulation_steps {} must be "
        "positive and multiply to the global batch {}",
        split.world_size, split.micro_batch, split.accumulation_steps, global_batch_));
  }
  return OkStatus();
}

StatusOr<std::vector<int64_t>> BatchSampler::MicroBatchStarts(int64_t step, const BatchSplit& split,
                                                              int rank, int micro_step) const {
  ZS_RETURN_IF_ERROR(ValidateSplit(split));
  if (step < 0) return InvalidArgumentError(fmt::format("BatchSampler: step {} < 0", step));
  if (rank < 0 || rank >= split.world_size) {
    return InvalidArgumentError(
        fmt::format("BatchSampler: rank {} outside [0, world_size {})", rank, split.world_size));
  }
  if (micro_step < 0 || micro_step >= split.accumulation_steps) {
    return InvalidArgumentError(
        fmt::format("BatchSampler: micro_step {} outside [0, accumulation_steps {})", micro_step,
                    split.accumulation_steps));
  }
  std::vector<int64_t> starts(static_cast<size_t>(split.micro_batch));
  for (int b = 0; b < split.micro_batch; ++b) {
    starts[static_cast<size_t>(b)] = Sample(step, GlobalIndex(split, rank, micro_step, b));
  }
  return starts;
}

Status BatchSampler::FillMicroBatch(int64_t step, const BatchSplit& split, int rank, int micro_step,
                                    std::span<int32_t> inputs, std::span<int32_t> targets) const {
  ZS_ASSIGN_OR_RETURN(std::vector<int64_t> starts, MicroBatchStarts(step, split, rank, micro_step));
  const auto want = static_cast<size_t>(split.micro_batch * seq_len_);
  if (inputs.size() != want || targets.size() != want) {
    return InvalidArgumentError(fmt::format(
        "BatchSampler: inputs ({} values) and targets ({} values) must each hold micro_batch {} "
        "x seq_len {} = {}",
        inputs.size(), targets.size(), split.micro_batch, seq_len_, want));
  }
  const auto t = static_cast<size_t>(seq_len_);
  for (size_t b = 0; b < starts.size(); ++b) {
    const auto source = tokens_.subspan(static_cast<size_t>(starts[b]), t + 1);
    std::copy_n(source.begin(), t, inputs.begin() + static_cast<ptrdiff_t>(b * t));
    std::copy_n(source.begin() + 1, t, targets.begin() + static_cast<ptrdiff_t>(b * t));
  }
  return OkStatus();
}

}  // namespace zs
