// SegmentCostProbe: measures what each segment of a tensor-parallel GPT ([Note: segments] in
// tp_gpt.h: the embedding, a layer, the head) costs in forward + backward seconds on this rank,
// so a pipeline can be partitioned by time instead of by parameter count (stage_partition.h).
// Parameter count is a poor proxy for a GPT: the embedding holds wte (vocab x hidden) but only
// gathers rows, while the head, which holds only ln_f (wte is tied), runs the vocabulary
// matmul and the cross-entropy.
//
// Contract
// - MeasureSegmentCosts is collective over groups.world(): every rank calls it with the same
//   options, in the same order relative to its other collectives. Each rank builds a probe
//   model of ONE layer (the config's vocabulary, hidden, heads, seq; TpGpt over this rank's
//   tp group, so tensor-parallel layers pay their collectives as in training) in a ZeroEngine
//   of stage 0 on a one-rank group split from the world, with the compute precision of
//   `options.engine` (fp16/bf16; ZeRO stage, offload and the rest are ignored). It runs three
//   GptChunks (embedding, the block, the head reading wte from the same engine) micro-batch by
//   micro-batch: `warmup` untimed forward + backward passes, then `repeats` timed ones; a
//   segment's local cost is the median over the timed passes of its forward + backward seconds
//   (with `recompute`, the block's backward re-runs its forward, as in training).
// - What is not measured: ZeRO's gathers and reductions (dp), pipeline transfers and the tied
//   embedding's link between the first and the last stage: the probe measures compute (and tp
//   collectives), which is what a contiguous partition can balance.
// - All ranks get the same costs, bit for bit: every kind's local seconds are all-gathered over
//   the world (one all-gather of the six values) and the median over ranks is taken (the mean
//   of the two middle values for an even world), the same arithmetic on the same values on
//   every rank. So every rank partitions identically.
// - Memory: the probe model, its engine and its activations are counted in `tracker` (the
//   model states of one layer, the embedding and the head; one micro-batch's activations and
//   the model's tp scratch) and
//   freed before the call returns. Memory that was enough for training the real model's stage
//   with the embedding or the head is enough for the probe.
// - Experts (config.moe.experts > 0) are not supported: Unimplemented, saying so; partition such
//   a model by parameter count or by explicit costs (grid_gpt.h, PartitionCost).
// - Errors: InvalidArgument naming the values for warmup < 0, repeats < 1, micro_batch or seq
//   < 1, seq above max_seq; the model's config errors (TpGpt::Create); communicator and
//   hook errors, returned as they are. A rank whose measurement fails still joins the combining
//   gather, so the other ranks fail at once with Aborted naming it (its tp peers, blocked in a
//   collective with it, fail at their communicator's timeout).
// - One thread per rank; `groups`, `device` and `tracker` are borrowed for the call only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/process_groups.h"
#include "runtime/device/device.h"
#include "runtime/device/memory_tracker.h"
#include "runtime/engine/engine_config.h"
#include "runtime/parallel/gpt/tp_gpt.h"

namespace zs::parallel {

struct SegmentCostProbeOptions {
  TpGptConfig model;  // its layer count is ignored: the probe builds one layer
  EngineConfig engine;    // only the compute precision (fp16, bf16) is used
  int64_t micro_batch = 1;  // sequences per micro-batch, as the pipeline runs them
  int64_t seq = 1;
  bool recompute = false;
  int warmup = 1;
  int repeats = 5;
};

// Forward + backward seconds of one micro-batch through each kind of segment, and the forward
// alone (the backward is the difference). A partition balances the totals; the forwards say how
// a segment splits its work between the phases, which GPipe runs apart ([Note: phase split] in
// bench/bench_parallel.cc).
struct SegmentKindCosts {
  double embed = 0;
  double block = 0;  // one layer
  double head = 0;
  double embed_forward = 0;
  double block_forward = 0;
  double head_forward = 0;

  // The cost of each of a `layers`-layer model's segments: embed, `layers` x block, head.
  std::vector<double> PerSegment(int layers) const;
  // "embed 0.12 ms, block 1.5 ms, head 0.8 ms"
  std::string ToString() const;
};

StatusOr<SegmentKindCosts> MeasureSegmentCosts(const SegmentCostProbeOptions& options,
                                               const ProcessGroups& groups, Device& device,
                                               MemoryTracker* tracker);

}  // namespace zs::parallel
