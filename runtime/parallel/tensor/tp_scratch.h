// TpScratch: the buffers the tp layers' collectives work in (a gathered input, a partial sum
// before its reduce-scatter, a replicated parameter's partial gradient). Their contents are
// dead between calls, so one TpScratch serves every layer and every micro-batch of a rank
// (the calls of one rank are sequential), and the per-micro-batch activations keep only what
// backward needs: with sequence parallelism, this rank's row block, as in Megatron (a
// column-parallel layer gathers its input again in backward instead of keeping it).
//
// Contract
// - Owned by the caller (TpGpt, runtime/parallel/gpt, owns one); one thread at a time.
// - [Note: tp scratch grows to its largest request] Each buffer grows to exactly the largest
//   request it has had (a growing request reserves exactly that many floats; a smaller one
//   reuses the allocation) and never shrinks, so bytes() is the sum of the three largest
//   requests, a function of the calls made, not of their order (a plain resize may allocate up
//   to twice the buffer's current size, so the planner could not know it). A pointer a call
//   returns stays valid until a request larger than any before it of the same buffer.
// - Memory: bytes() is recorded in `tracker` (host tier, activations, as the activations the
//   model keeps) each time a buffer grows, and given back by the destructor. The tracker may be
//   null and must outlive the object.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/device/memory_tracker.h"
#include "runtime/device/tracked_bytes.h"

namespace zs::tp {

class TpScratch {
 public:
  explicit TpScratch(MemoryTracker* tracker = nullptr)
      : tracked_(tracker, MemoryTier::kHost, MemoryCategory::kActivations) {}

  // [rows, width]: gathered inputs, partial sums, gathered dy.
  float* Full(int64_t n) { return Grow(full_, n); }
  // [rows, width] second buffer; replicated gradients' partials.
  float* Partial(int64_t n) { return Grow(partial_, n); }
  // A third: an MLP branch that runs on all rows under sequence parallelism (the experts,
  // [Note: experts over tp] in runtime/parallel/gpt/moe_block_mlp.h): its all-rows output, or
  // output gradient and input gradient.
  float* Rows(int64_t n) { return Grow(rows_, n); }

  int64_t bytes() const {
    return static_cast<int64_t>((full_.capacity() + partial_.capacity() + rows_.capacity()) *
                                sizeof(float));
  }

 private:
  float* Grow(std::vector<float>& v, int64_t n) {
    if (static_cast<size_t>(n) > v.capacity()) {
      v.reserve(static_cast<size_t>(n));  // exactly n: [Note: tp scratch grows to its largest ...]
      tracked_.Set(bytes());
    }
    v.resize(static_cast<size_t>(n));
    return v.data();
  }

  std::vector<float> full_, partial_, rows_;
  TrackedBytes tracked_;  // bytes() in the tracker (kHost, kActivations)
};

}  // namespace zs::tp
