// TpScratch: the buffers the tp layers' collectives work in (a gathered input, a partial sum
// before its reduce-scatter, a replicated parameter's partial gradient). Their contents are
// dead between calls, so one TpScratch serves every layer and every micro-batch of a rank
// (the calls of one rank are sequential), and the per-micro-batch activations keep only what
// backward needs: with sequence parallelism, this rank's row block, as in Megatron (a
// column-parallel layer gathers its input again in backward instead of keeping it).
//
// Contract
// - Owned by the caller (TpGpt, runtime/parallel/gpt, owns one); one thread at a time. Buffers
//   grow to the largest request and stay allocated; bytes() counts them (activations, for the
//   tracker).
#pragma once

#include <cstdint>
#include <vector>

namespace zs::tp {

struct TpScratch {
  std::vector<float> full;     // [rows, width]: gathered inputs, partial sums, gathered dy
  std::vector<float> partial;  // [rows, width] second buffer; replicated gradients' partials
  // A third: an MLP branch that runs on all rows under sequence parallelism (the experts,
  // [Note: experts over tp] in runtime/parallel/gpt/moe_block_mlp.h): its all-rows output, or
  // output gradient and input gradient.
  std::vector<float> rows;

  float* Full(int64_t n) {
    full.resize(static_cast<size_t>(n));
    return full.data();
  }
  float* Partial(int64_t n) {
    partial.resize(static_cast<size_t>(n));
    return partial.data();
  }
  float* Rows(int64_t n) {
    rows.resize(static_cast<size_t>(n));
    return rows.data();
  }
  int64_t bytes() const {
    return static_cast<int64_t>((full.capacity() + partial.capacity() + rows.capacity()) *
                                sizeof(float));
  }
};

}  // namespace zs::tp
