// ZeroEngine's optimizer tiles under every tier ([Note: optimizer tiles] in zero_engine_impl.h):
// where the fp32 master and states live (ShardStore), the device<->host copies around a host
// step (TileCopyPipeline), the parameter shards on NVMe (offload_param), and the
// acquire-step-release loop of Step().
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "optimizers/state_codec.h"
#include "runtime/engine/zero_engine_impl.h"

namespace zs {

// Host tiers below are "host memory"; TieredBuffer pins it as OptimizerPin()/ParamPin() say.
MemoryTier ZeroEngine::Impl::GradTier() const {
  // Stages 2/3 keep only the reduced shard, which leaves the device as the reducer produces it.
  if (optimizer_offload() == OffloadDevice::kNone || stage() < 2) return kTier;
  return MemoryTier::kHost;
}

MemoryTier ZeroEngine::Impl::ParamTier() const {
  const OffloadConfig& o = config_.zero_optimization.offload_param;
  if (o.device == OffloadDevice::kNone) return kTier;
  if (o.device == OffloadDevice::kNvme) return MemoryTier::kNvme;
  return MemoryTier::kHost;
}

PinMode ZeroEngine::Impl::OptimizerPin() const {
  return PinModeFor(config_.zero_optimization.offload_optimizer.pin_memory,
                    config_.zerostack.pin_memory_fallback);
}

PinMode ZeroEngine::Impl::ParamPin() const {
  return PinModeFor(config_.zero_optimization.offload_param.pin_memory,
                    config_.zerostack.pin_memory_fallback);
}

// The swap file of `what` ("optimizer", "params") for this rank: the config's nvme_path and aio
// section. One file per rank and purpose, so a killed run's file is found by the next run of
// the same rank.
NvmeStoreOptions ZeroEngine::Impl::NvmeOptions(const OffloadConfig& offload,
                                               const std::string& what) const {
  NvmeStoreOptions o;
  o.dir = offload.nvme_path;
  o.name = fmt::format("{}.rank{}", what, dp_.rank());
  o.block_size = config_.aio.block_size;
  o.queue_depth = config_.aio.queue_depth;
  o.intra_op_parallelism = config_.aio.intra_op_parallelism;
  o.single_submit = config_.aio.single_submit;
  o.overlap_events = config_.aio.overlap_events;
  return o;
}

namespace {
// The parameter ShardStore as the GatherCoordinator's shard source: a unit's slot is held (read
// in, unchanged) while its all-gather runs.
class StoreShardSource final : public ShardSource {
 public:
  explicit StoreShardSource(ShardStore& store) : store_(store) {}
  StatusOr<const void*> AcquireShard(int unit) override {
    ZS_ASSIGN_OR_RETURN(SlotView slot, store_.Acquire(unit));
    return static_cast<const void*>(slot.arrays[0]);
  }
  Status ReleaseShard(int unit) override { return store_.Release(unit, /*dirty=*/false); }
  bool CanAcquireShard(int unit) const override { return store_.CanAcquire(unit); }

 private:
  ShardStore& store_;
};
}  // namespace

Status ZeroEngine::Impl::CreateParamStore() {
  const OffloadConfig& offload = config_.zero_optimization.offload_param;
  std::vector<SlotShape> shapes;
  for (size_t u = 0; u < units_.size(); ++u) {
    shapes.push_back({fmt::format("unit '{}' parameter shard", model_.units[u].name),
                      {units_[u].layout.shard_size() * int64_t(DTypeSize(dtype_))}});
  }
  ShardStoreOptions options;
  options.tier = MemoryTier::kNvme;
  options.category = MemoryCategory::kParameters;
  options.what = fmt::format("parameters (rank {})", dp_.rank());
  options.buffer_count = offload.buffer_count;
  options.pin = ParamPin();
  options.pipeline_read = true;  // read ahead along the recorded gather order
  options.pipeline_write = true;
  options.nvme = NvmeOptions(offload, "params");
  options.trace = trace_;
  ZS_ASSIGN_OR_RETURN(param_store_, ShardStore::Create(options, std::move(shapes), device_));
  param_source_ = std::make_unique<StoreShardSource>(*param_store_);
  return OkStatus();
}

Status ZeroEngine::Impl::CreateOptimizerStore() {
  const OffloadConfig& offload = config_.zero_optimization.offload_optimizer;
  const int64_t sub_group =
      optimizer_offload() == OffloadDevice::kNone
          ? std::numeric_limits<int64_t>::max()
          : std::max(kSubGroupQuantum, config_.zero_optimization.sub_group_size / kSubGroupQuantum *
                                           kSubGroupQuantum);
  const OptimizerHyper hyper = Hyper(0.0);
  const StateDType type = state_dtype();
  const int num_states = NumStates(hyper.kind, hyper.beta1);
  const size_t elem = DTypeSize(dtype_);
  std::vector<SlotShape> shapes;
  int64_t largest_copy = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& s = units_[u];
    if (s.frozen) continue;  // [Note: frozen units]: no optimizer state
    for (int64_t begin = 0; begin < s.opt_size; begin += sub_group) {
      OptimizerTile tile;
      tile.unit = int(u);
      tile.begin = begin;
      tile.end = begin + std::min(sub_group, s.opt_size - begin);
      tile.segments = ClipSegments(s.segments, tile.begin, tile.end);
      const int64_t n = tile.size();
      SlotShape shape;
      shape.name = fmt::format("unit '{}' [{}, {})", model_.units[u].name, tile.begin, tile.end);
      shape.array_bytes.assign(kNumTileArrays, 0);
      shape.array_bytes[kMaster] = n * int64_t(sizeof(float));
      for (int i = 0; i < num_states; ++i) {
        shape.array_bytes[kState0 + i] = n * int64_t(StateCodeBytes(type));  // scales apart
        if (type == StateDType::kInt8) {
          shape.array_bytes[kScale0 + i] =
              (n + kQuantBlock - 1) / kQuantBlock * int64_t(sizeof(float));
        }
      }
      s.tiles.push_back(int(tiles_.size()));
      tiles_.push_back(std::move(tile));
      shapes.push_back(std::move(shape));
      largest_copy = std::max(largest_copy, n * int64_t(elem));
    }
  }
  ShardStoreOptions options;
  options.category = MemoryCategory::kOptimizerStates;
  options.what = fmt::format("optimizer states (rank {})", dp_.rank());
  switch (optimizer_offload()) {
    case OffloadDevice::kNone:
      options.tier = kTier;
      break;
    case OffloadDevice::kCpu:
      options.tier = MemoryTier::kHost;
      options.pin = OptimizerPin();
      break;
    case OffloadDevice::kNvme:
      options.tier = MemoryTier::kNvme;
      options.buffer_count = offload.buffer_count;
      options.pin = OptimizerPin();
      options.pipeline_read = offload.pipeline_read;
      options.pipeline_write = offload.pipeline_write;
      options.nvme = NvmeOptions(offload, "optimizer");
      break;
  }
  options.trace = trace_;
  ZS_ASSIGN_OR_RETURN(states_, ShardStore::Create(options, std::move(shapes), device_));
  // Copies around the step exist only when the optimizer is off the device (ZeRO-Offload).
  const bool copy = optimizer_offload() != OffloadDevice::kNone;
  ZS_ASSIGN_OR_RETURN(
      copies_, TileCopyPipeline::Create(device_, copy ? largest_copy : 0, OptimizerPin(), trace_));
  return OkStatus();
}

// Initial states are zero except Adagrad's accumulator (initial_accumulator_value).
Status ZeroEngine::Impl::InitOptimizerTiles(int unit, const std::vector<float>& master) {
  const OptimizerHyper hyper = Hyper(0.0);
  const StateDType type = state_dtype();
  std::vector<float> values;
  for (int t : units_[unit].tiles) {
    const OptimizerTile& tile = tiles_[size_t(t)];
    const int64_t n = tile.size();
    ZS_ASSIGN_OR_RETURN(SlotView arrays, states_->Acquire(t, ShardStore::Access::kOverwrite));
    std::copy_n(master.data() + tile.begin, n, reinterpret_cast<float*>(arrays.arrays[kMaster]));
    for (int i = 0; i < NumStates(hyper.kind, hyper.beta1); ++i) {
      float initial = hyper.kind == OptimizerKind::kAdagrad ? hyper.initial_accumulator : 0.0f;
      if (type == StateDType::kInt8 && Int8StoresRoot(hyper.kind, i)) initial = std::sqrt(initial);
      values.assign(size_t(n), initial);
      EncodeState(type, values.data(), tile.begin, n, arrays.arrays[kState0 + i],
                  reinterpret_cast<float*>(arrays.arrays[kScale0 + i]), 0, 0, i);
    }
    ZS_RETURN_IF_ERROR(states_->Release(t, /*dirty=*/true));
  }
  return OkStatus();
}

Status ZeroEngine::Impl::ReadOptimizerRange(int unit, std::vector<float>& out) {
  UnitState& s = units_[size_t(unit)];
  out.assign(size_t(s.opt_size), 0.0f);
  if (s.frozen) {  // [Note: frozen units]: the parameters are the values
    const size_t elem = DTypeSize(dtype_);
    if (param_store_ != nullptr) {  // stage 3: the slot is the shard, the optimizer range
      ZS_ASSIGN_OR_RETURN(SlotView slot, param_store_->Acquire(unit));
      ConvertToFloat(slot.arrays[0], dtype_, out.data(), out.size());
      return param_store_->Release(unit, /*dirty=*/false);
    }
    ConvertToFloat(s.params.data_as<const char>() + (s.opt_begin - s.param_base) * int64_t(elem),
                   dtype_, out.data(), out.size());
    return OkStatus();
  }
  for (int t : s.tiles) {
    const OptimizerTile& tile = tiles_[size_t(t)];
    ZS_ASSIGN_OR_RETURN(SlotView arrays, states_->Acquire(t));
    std::copy_n(reinterpret_cast<const float*>(arrays.arrays[kMaster]), tile.size(),
                out.data() + tile.begin);
    ZS_RETURN_IF_ERROR(states_->Release(t, /*dirty=*/false));
  }
  return OkStatus();
}

Status ZeroEngine::Impl::TilesUsable() const {
  if (tiles_broken_.ok()) return OkStatus();
  return AbortedError(fmt::format("engine (rank {}): an earlier optimizer step failed: {}",
                                  dp_.rank(), tiles_broken_.ToString()));
}

Status ZeroEngine::Impl::StepTiles(const OptimizerHyper& hyper, float grad_scale) {
  ZS_RETURN_IF_ERROR(TilesUsable());
  Status status = StepTilesPass(hyper, grad_scale);
  if (!status.ok()) tiles_broken_ = status;
  return status;
}

// Acquire, step, release: the same loop whatever the tier the states live in (shard_store.h)
// and wherever the gradients and parameters are (tile_copy_pipeline.h).
Status ZeroEngine::Impl::StepTilesPass(const OptimizerHyper& hyper, float grad_scale) {
  const std::vector<GroupHyper> groups = GroupHypers(hyper);
  const StepMemoryPlan plan = PlanStepMemory(hyper);
  const size_t elem = DTypeSize(dtype_);
  const bool offloaded = optimizer_offload() != OffloadDevice::kNone;
  std::vector<TileCopy> copies;
  for (const OptimizerTile& tile : tiles_) {
    const UnitState& s = units_[size_t(tile.unit)];
    TileCopy c;
    c.grad = s.grads.data_as<const char>() + (s.opt_begin + tile.begin - s.grad_base) * elem;
    c.grad_bytes = tile.size() * int64_t(elem);
    c.grad_on_device = offloaded && s.grads.tier() == kTier;
    if (s.params) {  // else the tile's parameters are in param_store_'s slot (params on NVMe)
      c.param = s.params.data_as<char>() + (s.opt_begin + tile.begin - s.param_base) * elem;
      c.param_bytes = tile.size() * int64_t(elem);
      c.param_on_device = offloaded && s.params.tier() == kTier;
    }
    copies.push_back(c);
  }
  ZS_RETURN_IF_ERROR(copies_->Begin(std::move(copies)));
  for (size_t t = 0; t < tiles_.size(); ++t) {
    const OptimizerTile& tile = tiles_[t];
    const UnitState& s = units_[size_t(tile.unit)];
    ZS_ASSIGN_OR_RETURN(SlotView arrays, states_->Acquire(int(t)));
    ZS_ASSIGN_OR_RETURN(TileHostView io, copies_->Acquire(int(t)));
    // Parameters on NVMe (stage 3): the unit's shard slot is held over its tiles, which cover
    // the whole shard, so it is overwritten without being read.
    const bool first_of_unit = s.tiles.front() == int(t), last_of_unit = s.tiles.back() == int(t);
    if (param_store_ != nullptr) {
      if (first_of_unit) {
        ZS_ASSIGN_OR_RETURN(param_slot_,
                            param_store_->Acquire(tile.unit, ShardStore::Access::kOverwrite));
      }
      io.param_out = param_slot_.arrays[0] + tile.begin * int64_t(elem);
    }
    ShardStep shard;
    shard.n = tile.size();
    shard.master = reinterpret_cast<float*>(arrays.arrays[kMaster]);
    for (int i = 0; i < 2; ++i) {
      shard.state[i] = arrays.arrays[kState0 + i];
      shard.state_scale[i] = reinterpret_cast<float*>(arrays.arrays[kScale0 + i]);
    }
    shard.state_dtype = state_dtype();
    shard.grad = io.grad;
    shard.grad_dtype = dtype_;
    shard.grad_scale = grad_scale;
    shard.param_out = io.param_out;
    shard.param_dtype = dtype_;
    shard.prefetch_elements = plan.prefetch_elements;
    shard.param_out_stores = plan.param_out_stores;
    shard.segments = tile.segments;
    shard.groups = groups;
    // The stochastic-rounding stream of this unit and range (bf16 states), at the tile's place.
    shard.seed = (uint64_t(tile.unit) << 40) ^ uint64_t(s.opt_begin);
    shard.index_base = tile.begin;
    {
      TraceRecorder::Span span;
      if (trace_ != nullptr) {
        span = trace_->Begin(track_optimizer_, "step " + states_->shape(int(t)).name,
                             fmt::format(R"({{"elements":{}}})", tile.size()));
      }
      optimizer_.Step(hyper, shard);
    }
    ZS_RETURN_IF_ERROR(copies_->Release(int(t)));
    ZS_RETURN_IF_ERROR(states_->Release(int(t), /*dirty=*/true));
    if (param_store_ != nullptr && last_of_unit) {
      ZS_RETURN_IF_ERROR(param_store_->Release(tile.unit, /*dirty=*/true));
    }
  }
  ZS_RETURN_IF_ERROR(copies_->Finish());  // the parameters are on the device again
  states_->EndPass();
  return OkStatus();
}

}  // namespace zs
