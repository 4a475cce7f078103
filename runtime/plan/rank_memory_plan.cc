#include "runtime/plan/rank_memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <memory>

#include "offload/pinned_buffer_pool.h"
#include "offload/shard_store.h"
#include "offload/tile_copy_pipeline.h"
#include "optimizers/optimizer_spec.h"
#include "runtime/device/counting_device.h"
#include "runtime/device/tracked_bytes.h"
#include "runtime/engine/engine_dtypes.h"
#include "runtime/gather/gather_coordinator.h"
#include "runtime/plan/null_communicator.h"
#include "runtime/reduce/gradient_reducer.h"
#include "runtime/sharding/shard_layout.h"

namespace zs {
namespace {

// [Note: planned like the engine] Each helper below names the engine code it follows. When the
// engine changes what it allocates, plan_tracker_test fails until this file follows.

// The engine's own mapping of the config (engine_dtypes.h): the optimizer kind and the momentum
// that decide how many states it keeps.
int NumStatesOf(const EngineConfig& c) {
  return NumStates(OptimizerKindOf(c.optimizer), OptimizerMomentumOf(c.optimizer));
}

// The engine's tile arrays (zero_engine_impl.h TileArray): master, two states, two scales.
constexpr int kArrays = 5;

// One optimizer tile's array bytes (zero_engine_offload.cc CreateOptimizerStore).
std::vector<int64_t> TileArrayBytes(int64_t n, int num_states, StateDType type) {
  std::vector<int64_t> bytes(kArrays, 0);
  bytes[0] = n * int64_t(sizeof(float));
  for (int i = 0; i < num_states; ++i) {
    bytes[1 + i] = n * int64_t(StateCodeBytes(type));
    if (type == StateDType::kInt8) {
      bytes[3 + i] = (n + kQuantBlock - 1) / kQuantBlock * int64_t(sizeof(float));
    }
  }
  return bytes;
}

int64_t AlignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

struct SimUnit {
  int forward_uses = 0;
  int backward_done = 0;
  int open = 0;
  DeviceBuffer staging;  // fp32 gradient staging while the micro-batch's backward runs
  DeviceBuffer view;     // fp32 view while open (bf16/fp16)
};

}  // namespace

int64_t PlanUnit::numel() const {
  int64_t n = 0;
  for (int64_t s : param_sizes) n += s;
  return n;
}

std::vector<PlanBracket> SequentialOrder(int num_units) {
  std::vector<PlanBracket> order;
  for (int u = 0; u < num_units; ++u) {
    order.push_back({u, false, true});
    order.push_back({u, false, false});
  }
  for (int u = num_units - 1; u >= 0; --u) {
    order.push_back({u, true, true});
    order.push_back({u, true, false});
  }
  return order;
}

StatusOr<RankPlan> PlanRankMemory(const RankPlanInput& in) {
  const EngineConfig& config = in.config;
  const ZeroConfig& zero = config.zero_optimization;
  const int stage = zero.stage;
  if (stage < 0 || stage > 3) {
    return InvalidArgumentError(fmt::format("plan: ZeRO stage {} is not 0, 1, 2 or 3", stage));
  }
  if (in.dp < 1) return InvalidArgumentError(fmt::format("plan: dp {} < 1", in.dp));
  if (in.dp_rank < 0 || in.dp_rank >= in.dp) {
    return InvalidArgumentError(
        fmt::format("plan: dp rank {} is not in [0, dp {})", in.dp_rank, in.dp));
  }
  const int n_units = int(in.units.size());
  {  // The bracket order: known units, balanced per unit.
    std::vector<int> open(size_t(n_units), 0);
    for (const PlanBracket& b : in.order) {
      if (b.unit < 0 || b.unit >= n_units) {
        return InvalidArgumentError(
            fmt::format("plan: bracket of unit {} (the rank has {} units)", b.unit, n_units));
      }
      open[size_t(b.unit)] += b.begin ? 1 : -1;
      if (open[size_t(b.unit)] < 0) {
        return InvalidArgumentError(
            fmt::format("plan: unit {} ('{}') ends a bracket it never began", b.unit,
                        in.units[size_t(b.unit)].name));
      }
    }
    for (int u = 0; u < n_units; ++u) {
      if (open[size_t(u)] != 0) {
        return InvalidArgumentError(fmt::format("plan: unit {} ('{}') has {} brackets left open", u,
                                                in.units[size_t(u)].name, open[size_t(u)]));
      }
    }
  }

  RankPlan plan;
  plan.num_units = n_units;
  plan.bucket_buffers = int(config.zerostack.max_inflight_buckets);
  MemoryTracker tracker(in.dp_rank);
  CountingDevice device(tracker, in.device_kind);
  NullCommunicator gather_comm(in.dp_rank, in.dp, "dp.gather");
  NullCommunicator reduce_comm(in.dp_rank, in.dp, "dp.reduce");
  const DType dtype = ComputeDTypeOf(config);
  const size_t elem = DTypeSize(dtype);
  const MemoryTier kTier = MemoryTier::kDevice;
  const OffloadDevice opt_offload = zero.offload_optimizer.device;
  const OffloadDevice param_offload = zero.offload_param.device;
  const bool params_on_nvme = param_offload == OffloadDevice::kNvme;
  // zero_engine_offload.cc GradTier / ParamTier / OptimizerPin / ParamPin.
  const MemoryTier grad_tier =
      opt_offload == OffloadDevice::kNone || stage < 2 ? kTier : MemoryTier::kHost;
  const MemoryTier param_tier = param_offload == OffloadDevice::kNone ? kTier : MemoryTier::kHost;
  const PinMode opt_pin =
      PinModeFor(zero.offload_optimizer.pin_memory, config.zerostack.pin_memory_fallback);
  const PinMode param_pin =
      PinModeFor(zero.offload_param.pin_memory, config.zerostack.pin_memory_fallback);

  // zero_engine.cc Impl::Init: a ShardLayout per unit, then params and grads per stage.
  std::vector<ShardLayout> layouts;
  std::vector<TieredBuffer> params, grads;
  std::vector<int64_t> opt_sizes;
  for (const PlanUnit& u : in.units) {
    auto layout = ShardLayout::Create(u.param_sizes, in.dp, config.zerostack.alignment);
    if (!layout.ok()) {
      return InvalidArgumentError(fmt::format("unit '{}': {}", u.name, layout.status().message()));
    }
    const int64_t padded = layout->padded_size(), shard = layout->shard_size();
    plan.numel += u.numel();
    plan.padded_numel += padded;
    if (!params_on_nvme) {
      ZS_ASSIGN_OR_RETURN(
          TieredBuffer p,
          TieredBuffer::Allocate(device, size_t(stage == 3 ? shard : padded) * elem, param_tier,
                                 param_pin, MemoryCategory::kParameters, u.name));
      params.push_back(std::move(p));
    }
    ZS_ASSIGN_OR_RETURN(
        TieredBuffer g,
        TieredBuffer::Allocate(device, size_t(stage >= 2 ? shard : padded) * elem, grad_tier,
                               opt_pin, MemoryCategory::kGradients, u.name));
    grads.push_back(std::move(g));
    opt_sizes.push_back(stage == 0 ? padded : shard);
    layouts.push_back(std::move(*layout));
  }

  // zero_engine_offload.cc CreateOptimizerStore: tiles of sub_group_size under offload.
  const int64_t kQuantum = 65536;  // zero_engine_impl.h kSubGroupQuantum
  const int64_t sub_group = opt_offload == OffloadDevice::kNone
                                ? std::numeric_limits<int64_t>::max()
                                : std::max(kQuantum, zero.sub_group_size / kQuantum * kQuantum);
  const int num_states = NumStatesOf(config);
  const StateDType state_type = OptimizerStateDTypeOf(config);
  std::vector<SlotShape> shapes;
  int64_t largest_copy = 0;
  for (int u = 0; u < n_units; ++u) {
    for (int64_t begin = 0; begin < opt_sizes[size_t(u)]; begin += sub_group) {
      const int64_t n = std::min(sub_group, opt_sizes[size_t(u)] - begin);
      shapes.push_back(
          {fmt::format("unit '{}' [{}, {})", in.units[size_t(u)].name, begin, begin + n),
           TileArrayBytes(n, num_states, state_type)});
      largest_copy = std::max(largest_copy, n * int64_t(elem));
    }
  }
  std::unique_ptr<ShardStore> states;
  std::unique_ptr<PinnedBufferPool> state_staging;
  if (opt_offload != OffloadDevice::kNvme) {
    ShardStoreOptions options;
    options.category = MemoryCategory::kOptimizerStates;
    options.what = "optimizer states";
    options.tier = opt_offload == OffloadDevice::kNone ? kTier : MemoryTier::kHost;
    options.pin = opt_offload == OffloadDevice::kNone ? PinMode::kPageable : opt_pin;
    ZS_ASSIGN_OR_RETURN(states, ShardStore::Create(options, std::move(shapes), device));
  } else {
    // offload/shard_store.cc for kNvme: the file holds every slot (arrays 4 KiB aligned) and
    // is counted under kNvme; buffer_count staging buffers of the largest slot.
    int64_t total = 0, largest = 0;
    for (const SlotShape& s : shapes) {
      int64_t bytes = 0;
      for (int64_t b : s.array_bytes) bytes += AlignUp(b, 4096);
      total += bytes;
      largest = std::max(largest, bytes);
    }
    tracker.Add(MemoryTier::kNvme, MemoryCategory::kOptimizerStates, total);
    ZS_ASSIGN_OR_RETURN(state_staging,
                        PinnedBufferPool::Create(device, zero.offload_optimizer.buffer_count,
                                                 size_t(std::max<int64_t>(largest, 1)), opt_pin,
                                                 MemoryCategory::kOptimizerStates,
                                                 "NVMe staging buffers of the optimizer states"));
  }
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<TileCopyPipeline> copies,
                      TileCopyPipeline::Create(
                          device, opt_offload != OffloadDevice::kNone ? largest_copy : 0, opt_pin));
  // zero_engine_offload.cc CreateParamStore (offload_param nvme): one slot per unit's shard.
  std::unique_ptr<PinnedBufferPool> param_staging;
  if (params_on_nvme) {
    int64_t total = 0, largest = 0;
    for (const ShardLayout& l : layouts) {
      const int64_t bytes = AlignUp(l.shard_size() * int64_t(elem), 4096);
      total += bytes;
      largest = std::max(largest, bytes);
    }
    tracker.Add(MemoryTier::kNvme, MemoryCategory::kParameters, total);
    ZS_ASSIGN_OR_RETURN(param_staging,
                        PinnedBufferPool::Create(device, zero.offload_param.buffer_count,
                                                 size_t(std::max<int64_t>(largest, 1)), param_pin,
                                                 MemoryCategory::kParameters,
                                                 "NVMe staging buffers of the parameters"));
  }

  // zero_engine.cc Impl::Init: the reducer (its bucket buffers) and, at stage 3, the gatherer.
  ReducerOptions reducer_options;
  reducer_options.dtype = dtype;
  reducer_options.reduction =
      stage >= 2 ? GradReduction::kReduceScatter : GradReduction::kAllReduce;
  reducer_options.bucket_elements = zero.reduce_bucket_size;
  reducer_options.max_inflight = int(config.zerostack.max_inflight_buckets);
  reducer_options.overlap = zero.overlap_comm;
  reducer_options.tier = kTier;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<GradientReducer> reducer,
                      GradientReducer::Create(layouts, reducer_options, device, reduce_comm));
  // The reducer holds max_inflight buffers of its largest bucket; the bucket count follows
  // BucketPlan's widths (bucket_plan.h: columns of width * world elements, the width a
  // multiple of the alignment), without building the plans a second time.
  if (elem > 0 && reducer_options.max_inflight > 0) {
    plan.largest_bucket_elements = tracker.Current(kTier, MemoryCategory::kCommBuffers) /
                                   int64_t(elem) / reducer_options.max_inflight;
  }
  {
    const int64_t granule = int64_t(in.dp) * config.zerostack.alignment;
    const int64_t width =
        std::max<int64_t>(1, zero.reduce_bucket_size / granule) * config.zerostack.alignment;
    for (const ShardLayout& l : layouts) {
      plan.num_buckets += int((l.shard_size() + width - 1) / width);
    }
  }
  std::unique_ptr<GatherCoordinator> gatherer;
  if (stage == 3) {
    static const char kShard = 0;  // never read: the communicator moves nothing
    std::vector<GatherUnitInfo> infos;
    for (int u = 0; u < n_units; ++u) {
      infos.push_back(
          GatherUnitInfo{in.units[size_t(u)].name, layouts[size_t(u)].shard_size(), &kShard,
                         in.units[size_t(u)].numel() <= zero.stage3_param_persistence_threshold});
    }
    GatherOptions options;
    options.dtype = dtype;
    options.prefetch_elements = zero.stage3_prefetch_bucket_size;
    options.max_live_elements = zero.stage3_max_live_parameters;
    options.max_reuse_distance_elements = zero.stage3_max_reuse_distance;
    options.prefetch = config.zerostack.prefetch;
    options.tier = kTier;
    ZS_ASSIGN_OR_RETURN(gatherer,
                        GatherCoordinator::Create(std::move(infos), options, device, gather_comm));
  }

  // Two steps of one micro-batch each: the first records the gather trace, the second replays
  // it with prefetch and reuse, as a real run's steady state. The model's activations are held
  // from the first forward on.
  TrackedBytes activations(&tracker, in.activation_tier, MemoryCategory::kActivations);
  activations.Set(in.model_activation_bytes);
  for (int step = 0; step < 2; ++step) {
    std::vector<SimUnit> sim(static_cast<size_t>(n_units));
    for (const PlanBracket& b : in.order) {
      SimUnit& s = sim[size_t(b.unit)];
      const ShardLayout& layout = layouts[size_t(b.unit)];
      if (b.begin) {
        // zero_engine.cc Impl::Begin: the staging at the first backward bracket, then the
        // gather and the fp32 view when the unit opens.
        if (b.backward) {
          if (!s.staging) {
            ZS_ASSIGN_OR_RETURN(s.staging, device.Allocate(size_t(layout.padded_size()) * 4, kTier,
                                                           MemoryCategory::kCommBuffers));
          }
        } else {
          ++s.forward_uses;
        }
        if (s.open++ > 0) continue;
        if (gatherer != nullptr) ZS_RETURN_IF_ERROR(gatherer->Acquire(b.unit).status());
        if (dtype != DType::kF32) {
          ZS_ASSIGN_OR_RETURN(s.view, device.Allocate(size_t(layout.unit_size()) * 4, kTier,
                                                      MemoryCategory::kActivations));
        }
      } else {
        // Impl::End: the staging is reduced and freed at the micro-batch's last backward
        // bracket; the view and the gathered unit go when the unit closes.
        if (b.backward && ++s.backward_done == s.forward_uses) s.staging.Reset();
        if (--s.open > 0) continue;
        s.view.Reset();
        if (gatherer != nullptr) ZS_RETURN_IF_ERROR(gatherer->Release(b.unit));
      }
    }
    if (gatherer != nullptr) {
      plan.peak_gathered_elements =
          std::max(plan.peak_gathered_elements, gatherer->stats().peak_live_elements);
      ZS_RETURN_IF_ERROR(gatherer->EndStep());
    }
  }
  plan.memory = tracker.Snapshot();
  return plan;
}

}  // namespace zs
