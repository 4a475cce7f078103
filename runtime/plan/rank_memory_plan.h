// PlanRankMemory: what one data-parallel rank's ZeroEngine (and the model activations beside
// it) allocates, by memory tier and category, at its peak over a training step, without
// allocating it.
//
// Contract
// - Pure with respect to the host: nothing is allocated but bookkeeping, no file is created, no
//   network is touched. The engine's layout and buffers are built by the runtime's own code on a
//   CountingDevice (runtime/device/counting_device.h) behind a NullCommunicator: ShardLayout for
//   every unit (alignment and padding), the GradientReducer's bucket buffers (BucketPlan), the
//   GatherCoordinator replaying the step's bracket order (prefetch, reuse and the live cap, as
//   in a real run's second step), the optimizer's ShardStore slots and the offload copy
//   pipeline's staging buffers. What ZeroEngine::Impl allocates itself (zero_engine.cc: the
//   parameter and gradient arrays per stage and offload tier, the fp32 gradient staging of a
//   unit in backward, the fp32 view of a unit in use under bf16/fp16, the optimizer tiles of
//   zero_engine_offload.cc) is mirrored here unit by unit; [Note: planned like the engine] in
//   rank_memory_plan.cc names each line it follows, and the tracker test
//   (tests/runtime/plan/plan_tracker_test.cc) keeps the two in agreement.
// - Cost: O(units + parameters + buckets + brackets), never per element; a trillion-parameter
//   rank plans in milliseconds.
// - NVMe stores are counted, not created: the swap file's bytes (every array rounded up to
//   4 KiB, as ShardStore lays out an NVMe slot) under kNvme and the staging buffers in host
//   memory, as offload/shard_store.cc counts them.
// - Errors: InvalidArgument naming the value for a bad world size (dp, or edp not dividing it),
//   rank, alignment, a bracket of an unknown unit or an unbalanced bracket order; nothing is
//   ever exited.
// - Threads: any; calls are independent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/device/device.h"
#include "runtime/device/memory_tracker.h"
#include "runtime/engine/engine_config.h"

namespace zs {

// One gather unit: its parameters' element counts, in order (a ModelSpec's UnitSpec, sizes
// only).
struct PlanUnit {
  std::string name;
  std::vector<int64_t> param_sizes;
  // [Note: frozen units] (zero_engine.h): parameters only, no gradient, no optimizer tiles, no
  // bucket; its backward still stages an fp32 gradient as scratch.
  bool frozen = false;
  // Held by the expert engine (GridGpt: "block.i.moe", sharded over edp), not the dense one.
  bool expert = false;
  int64_t numel() const;
};

// One UnitAccess call of a micro-batch: Begin/End, Forward/Backward, of `unit`.
struct PlanBracket {
  int unit = 0;
  bool backward = false;
  bool begin = true;
};

struct RankPlanInput {
  EngineConfig config;             // stage, offload, buckets, dtypes, alignment, optimizer
  std::vector<PlanUnit> units;     // this rank's units (one pipeline stage's, tp-local shapes)
  std::vector<PlanBracket> order;  // one micro-batch's brackets, forward then backward
  int dp = 1;                      // data-parallel world size
  int dp_rank = 0;                 // the rank planned (padding makes every rank alike)
  // [Note: two engines] Units marked `expert` belong to a second engine of the same config over
  // the expert-data-parallel group of `edp` ranks (GridGpt's expert engine: dp / ep ranks, edp
  // rank dp_rank / ep); the rest to the dense engine over dp. Both allocate from one device,
  // so the peaks are the two engines' joint peaks over the one bracket order.
  int edp = 1;
  // What the model keeps besides the engine (activations, pipeline message buffers), held
  // through the step, in this tier, under kActivations.
  int64_t model_activation_bytes = 0;
  MemoryTier activation_tier = MemoryTier::kDevice;
  // The kind of device planned: kCuda counts pinned host memory as pinned_host.
  DeviceKind device_kind = DeviceKind::kCuda;
};

// With two engines ([Note: two engines]) the counts are over both: sums, but the largest
// bucket (the larger of the two reducers').
struct RankPlan {
  MemorySnapshot memory;     // peaks (and what stays allocated after the step, as current)
  int64_t numel = 0;         // parameters of the rank's units
  int64_t padded_numel = 0;  // with each unit padded to dp (edp) equal aligned shards
  int64_t expert_numel = 0;  // of numel, the expert engine's
  int64_t largest_bucket_elements = 0;  // the reducers' bucket buffers hold this many
  int num_buckets = 0;                  // over all units
  int bucket_buffers = 0;               // max_inflight_buckets per reducer, summed
  int num_units = 0;
  int64_t peak_gathered_elements = 0;  // stage 3, each engine's peak, summed
  int64_t Peak(MemoryTier t, MemoryCategory c) const { return memory.Peak(t, c); }
  int64_t TierPeak(MemoryTier t) const { return memory.TierPeak(t); }
};

StatusOr<RankPlan> PlanRankMemory(const RankPlanInput& input);

// The default bracket order of a model whose units are used once each, in order: F(0) .. F(n-1)
// then B(n-1) .. B(0).
std::vector<PlanBracket> SequentialOrder(int num_units);

}  // namespace zs
