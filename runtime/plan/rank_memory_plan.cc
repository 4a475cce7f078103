#include "runtime/plan/rank_memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <memory>

#include "offload/pinned_buffer_pool.h"
#include "offload/shard_store.h"
#include "offload/tile_copy_pipeline.h"
#include "runtime/base/log.h"
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

// One ZeroEngine's state on the counting device: what Impl::Init allocates for its units
// (zero_engine.cc, zero_engine_offload.cc), its reducer and (stage 3) its gatherer, each
// behind NullCommunicators of its group. `units` are indices into the rank's units.
struct PlannedEngine {
  std::vector<int> units;
  int world = 1, rank = 0;
  std::unique_ptr<NullCommunicator> gather_comm, reduce_comm;
  std::vector<ShardLayout> layouts;  // per local unit
  std::vector<TieredBuffer> params, grads;
  std::unique_ptr<ShardStore> states;
  std::unique_ptr<PinnedBufferPool> state_staging, param_staging;
  std::unique_ptr<TileCopyPipeline> copies;
  std::unique_ptr<GradientReducer> reducer;
  std::unique_ptr<GatherCoordinator> gatherer;
  int64_t peak_gathered = 0;  // over the steps
};

Status BuildEngine(const RankPlanInput& in, Device& device, MemoryTracker& tracker,
                   PlannedEngine& e, RankPlan& plan) {
  const EngineConfig& config = in.config;
  const ZeroConfig& zero = config.zero_optimization;
  const int stage = zero.stage;
  e.gather_comm = std::make_unique<NullCommunicator>(e.rank, e.world, "dp.gather");
  e.reduce_comm = std::make_unique<NullCommunicator>(e.rank, e.world, "dp.reduce");
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

  // zero_engine.cc Impl::Init: a ShardLayout per unit, then params and grads per stage; the
  // reducer's layout of a frozen unit is empty (no bucket).
  std::vector<ShardLayout> reducer_layouts;
  std::vector<int64_t> opt_sizes;  // per local unit; 0 for a frozen one (no optimizer tiles)
  for (int g : e.units) {
    const PlanUnit& u = in.units[size_t(g)];
    auto layout = ShardLayout::Create(u.param_sizes, e.world, config.zerostack.alignment);
    if (!layout.ok()) {
      return InvalidArgumentError(fmt::format("unit '{}': {}", u.name, layout.status().message()));
    }
    const int64_t padded = layout->padded_size(), shard = layout->shard_size();
    plan.numel += u.numel();
    plan.padded_numel += padded;
    if (u.expert) plan.expert_numel += u.numel();
    if (!params_on_nvme) {
      ZS_ASSIGN_OR_RETURN(
          TieredBuffer p,
          TieredBuffer::Allocate(device, size_t(stage == 3 ? shard : padded) * elem, param_tier,
                                 param_pin, MemoryCategory::kParameters, u.name));
      e.params.push_back(std::move(p));
    }
    if (!u.frozen) {
      ZS_ASSIGN_OR_RETURN(
          TieredBuffer g,
          TieredBuffer::Allocate(device, size_t(stage >= 2 ? shard : padded) * elem, grad_tier,
                                 opt_pin, MemoryCategory::kGradients, u.name));
      e.grads.push_back(std::move(g));
      reducer_layouts.push_back(*layout);
    } else {
      ZS_ASSIGN_OR_RETURN(ShardLayout empty,
                          ShardLayout::Create({}, e.world, config.zerostack.alignment));
      reducer_layouts.push_back(std::move(empty));
    }
    opt_sizes.push_back(u.frozen ? 0 : stage == 0 ? padded : shard);
    e.layouts.push_back(std::move(*layout));
  }
  const int n_units = int(e.units.size());

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
          {fmt::format("unit '{}' [{}, {})", in.units[size_t(e.units[size_t(u)])].name, begin,
                       begin + n),
           TileArrayBytes(n, num_states, state_type)});
      largest_copy = std::max(largest_copy, n * int64_t(elem));
    }
  }
  if (opt_offload != OffloadDevice::kNvme) {
    ShardStoreOptions options;
    options.category = MemoryCategory::kOptimizerStates;
    options.what = "optimizer states";
    options.tier = opt_offload == OffloadDevice::kNone ? kTier : MemoryTier::kHost;
    options.pin = opt_offload == OffloadDevice::kNone ? PinMode::kPageable : opt_pin;
    ZS_ASSIGN_OR_RETURN(e.states, ShardStore::Create(options, std::move(shapes), device));
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
    ZS_ASSIGN_OR_RETURN(e.state_staging,
                        PinnedBufferPool::Create(device, zero.offload_optimizer.buffer_count,
                                                 size_t(std::max<int64_t>(largest, 1)), opt_pin,
                                                 MemoryCategory::kOptimizerStates,
                                                 "NVMe staging buffers of the optimizer states"));
  }
  ZS_ASSIGN_OR_RETURN(e.copies,
                      TileCopyPipeline::Create(
                          device, opt_offload != OffloadDevice::kNone ? largest_copy : 0, opt_pin));
  // zero_engine_offload.cc CreateParamStore (offload_param nvme): one slot per unit's shard.
  if (params_on_nvme) {
    int64_t total = 0, largest = 0;
    for (const ShardLayout& l : e.layouts) {
      const int64_t bytes = AlignUp(l.shard_size() * int64_t(elem), 4096);
      total += bytes;
      largest = std::max(largest, bytes);
    }
    tracker.Add(MemoryTier::kNvme, MemoryCategory::kParameters, total);
    ZS_ASSIGN_OR_RETURN(e.param_staging,
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
  const int64_t comm_before = tracker.Current(kTier, MemoryCategory::kCommBuffers);
  ZS_ASSIGN_OR_RETURN(e.reducer, GradientReducer::Create(reducer_layouts, reducer_options, device,
                                                         *e.reduce_comm));
  plan.bucket_buffers += reducer_options.max_inflight;
  // The reducer holds max_inflight buffers of its largest bucket; the bucket count follows
  // BucketPlan's widths (bucket_plan.h: columns of width * world elements, the width a
  // multiple of the alignment), without building the plans a second time.
  if (elem > 0 && reducer_options.max_inflight > 0) {
    plan.largest_bucket_elements =
        std::max(plan.largest_bucket_elements,
                 (tracker.Current(kTier, MemoryCategory::kCommBuffers) - comm_before) /
                     int64_t(elem) / reducer_options.max_inflight);
  }
  {
    const int64_t granule = int64_t(e.world) * config.zerostack.alignment;
    const int64_t width =
        std::max<int64_t>(1, zero.reduce_bucket_size / granule) * config.zerostack.alignment;
    for (const ShardLayout& l : reducer_layouts) {
      plan.num_buckets += int((l.shard_size() + width - 1) / width);
    }
  }
  if (stage == 3) {
    static const char kShard = 0;  // never read: the communicator moves nothing
    std::vector<GatherUnitInfo> infos;
    for (int u = 0; u < n_units; ++u) {
      const PlanUnit& pu = in.units[size_t(e.units[size_t(u)])];
      infos.push_back(GatherUnitInfo{pu.name, e.layouts[size_t(u)].shard_size(), &kShard,
                                     pu.numel() <= zero.stage3_param_persistence_threshold});
    }
    GatherOptions options;
    options.dtype = dtype;
    options.prefetch_elements = zero.stage3_prefetch_bucket_size;
    options.max_live_elements = zero.stage3_max_live_parameters;
    options.max_reuse_distance_elements = zero.stage3_max_reuse_distance;
    options.prefetch = config.zerostack.prefetch;
    options.tier = kTier;
    ZS_ASSIGN_OR_RETURN(e.gatherer, GatherCoordinator::Create(std::move(infos), options, device,
                                                              *e.gather_comm));
  }
  return OkStatus();
}

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
  // The engines below only count: their run-time warnings (a unit above the soft cap of
  // stage3_max_live_parameters, a mixed frozen unit, ...) speak of a run, not of this plan, and
  // would repeat once per planned rank and configuration.
  ScopedLogThreshold quiet(LogLevel::kError);
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
  if (in.edp < 1 || in.dp % in.edp != 0) {
    return InvalidArgumentError(
        fmt::format("plan: the expert-data-parallel size edp {} does not divide dp {}", in.edp,
                    in.dp));
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
  MemoryTracker tracker(in.dp_rank);
  CountingDevice device(tracker, in.device_kind);
  const DType dtype = ComputeDTypeOf(config);
  const MemoryTier kTier = MemoryTier::kDevice;

  // [Note: two engines] The dense engine over dp, and the expert engine over edp when the rank
  // holds expert units (GridGpt creates them in this order). unit -> (engine, local index).
  PlannedEngine engines[2];
  std::vector<std::pair<int, int>> where(static_cast<size_t>(n_units));
  for (int u = 0; u < n_units; ++u) {
    PlannedEngine& e = engines[in.units[size_t(u)].expert ? 1 : 0];
    where[size_t(u)] = {in.units[size_t(u)].expert ? 1 : 0, int(e.units.size())};
    e.units.push_back(u);
  }
  engines[0].world = in.dp;
  engines[0].rank = in.dp_rank;
  engines[1].world = in.edp;
  engines[1].rank = in.dp_rank / (in.dp / in.edp);
  for (int k = 0; k < 2; ++k) {
    if (k == 1 && engines[1].units.empty()) continue;
    ZS_RETURN_IF_ERROR(BuildEngine(in, device, tracker, engines[k], plan));
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
      const auto [k, local] = where[size_t(b.unit)];
      PlannedEngine& e = engines[k];
      const ShardLayout& layout = e.layouts[size_t(local)];
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
        if (e.gatherer != nullptr) ZS_RETURN_IF_ERROR(e.gatherer->Acquire(local).status());
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
        if (e.gatherer != nullptr) ZS_RETURN_IF_ERROR(e.gatherer->Release(local));
      }
    }
    for (PlannedEngine& e : engines) {
      if (e.gatherer == nullptr) continue;
      e.peak_gathered = std::max(e.peak_gathered, e.gatherer->stats().peak_live_elements);
      ZS_RETURN_IF_ERROR(e.gatherer->EndStep());
    }
  }
  for (const PlannedEngine& e : engines) plan.peak_gathered_elements += e.peak_gathered;
  plan.memory = tracker.Snapshot();
  return plan;
}

}  // namespace zs
