// ZeroEngine::Impl and the per-unit and per-tile state behind it: private to the engine's
// sources (zero_engine.cc: the hooks, the step and the public API; zero_engine_offload.cc: the
// optimizer tiles, where their arrays live and the acquire-step-release loop). Not installed
// for use; see zero_engine.h for the contract.
#pragma once

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "offload/pinned_buffer_pool.h"
#include "offload/shard_store.h"
#include "offload/tile_copy_pipeline.h"
#include "optimizers/cpu_optimizer.h"
#include "optimizers/optimizer_spec.h"
#include "runtime/base/trace_recorder.h"
#include "runtime/engine/engine_dtypes.h"
#include "runtime/engine/loss_scaler.h"
#include "runtime/engine/step_memory_plan.h"
#include "runtime/engine/zero_engine.h"
#include "runtime/gather/gather_coordinator.h"
#include "runtime/reduce/gradient_reducer.h"

namespace zs {
namespace engine_internal {

// Everything the engine keeps lives in the device tier (on a CpuDevice that is host memory
// standing in for device memory, so budgets and reports read as they would on a GPU).
constexpr MemoryTier kTier = MemoryTier::kDevice;

// [Note: micro-batches in flight] A unit's brackets belong to a micro-batch: the one the caller
// named last (UnitAccess::SetMicroBatch; 0 for callers that never name one). Per unit, each
// micro-batch with brackets opened and its gradient not yet handed over is a MicroBatchUse:
//   forward only  forward brackets opened (forward_uses > 0); no gradient yet. A unit used
//                 twice in a forward (weight sharing) counts each use.
//   backward      its first backward bracket opened: the fp32 gradient staging exists and
//                 accumulates until the micro-batch's last backward bracket (backward_done ==
//                 forward_uses) hands it to the reducer, frees it and drops the record.
// A data-parallel loop has at most one record per unit; a pipeline stage has one per micro-batch
// in flight (1F1B: forwards of later micro-batches wait for their backward), but a gradient
// staging only while a micro-batch's backward is under way. With
// EngineParallelism::reduce_per_step every bracket belongs to one record, which Step() reduces.
// The parameters are materialized (gathered at stage 3, widened with bf16/fp16 compute) while
// any bracket of any micro-batch is open. Step requires no record left.
struct MicroBatchUse {
  explicit MicroBatchUse(int m) : micro_batch(m) {}
  int micro_batch = 0;
  int forward_uses = 0;   // forward brackets opened
  int backward_done = 0;  // backward brackets closed
  int open_backward = 0;  // backward brackets open now
  DeviceBuffer grad_staging;  // fp32 padded unit gradient: from the first BeginBackward
  bool in_backward() const { return bool(grad_staging); }
};

// One rank's storage and per-micro-batch bookkeeping for one unit.
struct UnitState {
  explicit UnitState(ShardLayout l) : layout(std::move(l)) {}

  ShardLayout layout;
  // [Note: frozen units] in zero_engine.h: every parameter has ParamSpec::trainable false. Then
  // `grads` and `tiles` stay empty, the reducer's plan of the unit has no bucket, and the fp32
  // values over the optimizer range are read from `params`.
  bool frozen = false;
  // A unit mixing frozen and trainable parameters: the frozen ones' indices (else empty). Their
  // gradient is zeroed before each reduction and their segments step in the frozen group.
  std::vector<int> frozen_params;
  // Stages 0-2: padded unit; stage 3: this rank's shard (compute dtype). Device memory, or host
  // memory under offload_param cpu (none under nvme: param_store_ holds it).
  TieredBuffer params;
  // Stages 0-1: padded unit; stages 2-3: shard (compute dtype); none when frozen. Device
  // memory, or host memory at stages 2-3 under offload_optimizer (the reducer's output leaves
  // the device at once).
  TieredBuffer grads;
  // The fp32 master and optimizer states over the optimizer range live in the engine's
  // ShardStore, one slot per optimizer tile ([Note: optimizer tiles]).
  std::vector<int> tiles;
  std::vector<ShardSegment> segments;  // cover the optimizer range, shard-relative
  int64_t opt_begin = 0;  // the optimizer range in the unit frame: [opt_begin, +opt_size)
  int64_t opt_size = 0;
  int64_t param_base = 0;  // unit offset of params' first element
  int64_t grad_base = 0;   // unit offset of grads' first element

  // Micro-batch state (the bracket rules in unit_access.h, [Note: micro-batches in flight]).
  std::vector<MicroBatchUse> in_flight;  // by first bracket; usually none or one
  int open = 0;                // brackets open now (forward and backward, nested)
  const void* full = nullptr;  // the full parameters (compute dtype) while open > 0
  DeviceBuffer view;           // fp32 widening of `full` while open > 0 (bf16/fp16 compute)
  int64_t reduced = 0;         // micro-batches reduced since the last Step
  TraceRecorder::Clock::time_point opened;  // when open went 0 -> 1 (trace spans)

  MicroBatchUse* Find(int micro_batch) {
    for (MicroBatchUse& use : in_flight) {
      if (use.micro_batch == micro_batch) return &use;
    }
    return nullptr;
  }
  void Drop(int micro_batch) {
    std::erase_if(in_flight, [&](const MicroBatchUse& u) { return u.micro_batch == micro_batch; });
  }
};

// [Note: unused units] in zero_engine.h: one micro-batch's reductions in the agreed order
// (allow_unused_units without reduce_per_step), from its first BeginBackward until its last unit
// is reduced. Units above next_unit are reduced; unused[u]: unit u had no forward bracket in the
// micro-batch when its backward began, so its gradient there is zero.
struct OrderedReduction {
  int micro_batch = 0;
  int next_unit = -1;
  std::vector<bool> unused;
};

// [Note: optimizer tiles] A rank's optimizer range of a unit is stepped in tiles: the whole
// range, or under offload_optimizer sub-groups of sub_group_size elements (rounded down to a
// multiple of kSubGroupQuantum) starting at multiples of it, so that every tile starts on an int8
// block and steps with index_base = its offset in the range: the same bits as one step of the
// whole range (optimizer_spec.h, [Note: bit-identical splits]). Each tile is one ShardStore slot
// holding the tile's arrays, in this order:
enum TileArray { kMaster = 0, kState0, kState1, kScale0, kScale1, kNumTileArrays };
constexpr int64_t kSubGroupQuantum = 65536;

struct OptimizerTile {
  int unit = 0;
  int64_t begin = 0;  // [begin, end) within the unit's optimizer range
  int64_t end = 0;
  std::vector<ShardSegment> segments;  // the unit's, clipped to the tile and rebased
  int64_t size() const { return end - begin; }
};

// Clips `segments` (covering a range) to [begin, end) and rebases them to begin.
inline std::vector<ShardSegment> ClipSegments(const std::vector<ShardSegment>& segments,
                                              int64_t begin, int64_t end) {
  std::vector<ShardSegment> out;
  for (const ShardSegment& seg : segments) {
    const int64_t b = std::max(seg.begin, begin), e = std::min(seg.end, end);
    if (b < e) out.push_back({b - begin, e - begin, seg.weight_decay, seg.group});
  }
  return out;
}

}  // namespace engine_internal

// The engine's own sources name these types unqualified (this header is theirs alone).
using namespace engine_internal;  // NOLINT(google-build-using-namespace)

class ZeroEngine::Impl {
 public:
  Impl(const EngineConfig& config, ModelSpec model, Device& device, Communicator& dp,
       TraceRecorder* trace, const EngineParallelism& parallel)
      : trace_(trace),
        parallel_(parallel),
        config_(config),
        model_(std::move(model)),
        device_(device),
        dp_(dp),
        dtype_(ComputeDTypeOf(config)),
        scaler_(config.fp16),
        schedule_(MakeLrSchedule(config.scheduler, config.optimizer.lr)),
        optimizer_(int(config.zerostack.optimizer_threads)) {
    if (trace_ != nullptr) {
      track_step_ = trace_->Track("engine step");
      track_compute_ = trace_->Track("compute");
      track_gather_ = trace_->Track("gather");
      track_reduce_ = trace_->Track("reduce");
      track_optimizer_ = trace_->Track("optimizer");
    }
  }

  Status Init(const ParamInit& init);

  // UnitAccess.
  Status Begin(int unit, bool backward);
  Status End(int unit, bool backward);
  std::span<const float> Param(int unit, int param);
  std::span<float> Grad(int unit, int param);
  float backward_scale() const {
    return scaler_.scale() / float(dp_.size() * config_.gradient_accumulation_steps);
  }

  StatusOr<StepResult> Step();
  // [Note: evaluation] in zero_engine.h.
  Status BeginEvaluation();
  Status EndEvaluation();
  StatusOr<double> PrepareStep();
  StatusOr<StepResult> FinishStep(double total);
  // This rank's sum of squares of its gradient shards (unscaled by inv_scale), over what counts
  // in the global norm ([Note: one norm over the grid]).
  double ShardSumSquares(double inv_scale) const;
  // reduce_per_step: hands every unit's accumulated gradient to the reducer.
  Status ReduceAccumulatedGradients();
  StatusOr<std::vector<float>> GatherMasterUnit(int unit);
  // Stages 1/2: every unit's parameters from their owners; frozen units (which a step leaves
  // unchanged) only with `frozen_too` (after a checkpoint load).
  Status AllGatherUpdatedParams(bool frozen_too);
  // The micro-batch the next brackets belong to ([Note: micro-batches in flight]).
  void SetMicroBatch(int micro_batch);
  int bracket_micro_batch() const { return parallel_.reduce_per_step ? 0 : micro_batch_; }
  // Hands a unit's complete gradient of one micro-batch to the reducer (nothing for a frozen
  // unit) and drops its record (zero_engine_reduction.cc, as the three below).
  Status ReduceMicroBatch(int unit, MicroBatchUse& use, bool accumulate);
  // A unit's last EndBackward of a micro-batch: reduce it now, or in the agreed order.
  Status CompleteMicroBatch(int unit, MicroBatchUse& use);
  // [Note: unused units]: reduces a zero gradient of `unit` (nothing for a frozen unit).
  Status ReduceZeros(int unit, bool accumulate);
  // [Note: unused units]: the bookkeeping at a micro-batch's brackets, and the reductions that
  // became due, in the agreed order.
  Status NoteForwardOrdered(int unit, int micro_batch);
  void NoteBackwardOrdered(int micro_batch);
  Status AdvanceOrdered(int micro_batch);
  // Stage 3: a unit small enough to stay gathered (stage3_param_persistence_threshold).
  bool persistent(int unit) const {
    return model_.units[size_t(unit)].numel() <=
           config_.zero_optimization.stage3_param_persistence_threshold;
  }
  bool ordered_reduction() const {
    return config_.zerostack.allow_unused_units && !parallel_.reduce_per_step;
  }
  // [Note: frozen units]: one log line (dp rank 0) per unit mixing frozen and trainable
  // parameters, naming them and the gradient and optimizer bytes this rank keeps for them.
  void LogMixedUnits() const;
  // [Note: frozen units]: zeroes the frozen parameters' part of a mixed unit's fp32 gradient.
  void ZeroFrozenGradients(int unit, float* grad) const;
  // The fp32 values of a unit over this rank's optimizer range (opt_size elements): the master
  // from the optimizer tiles, or a frozen unit's parameters widened.
  Status ReadOptimizerRange(int unit, std::vector<float>& out);
  // Lays out the optimizer tiles and creates the ShardStore and the copy pipeline.
  Status CreateOptimizerStore();
  // Writes a unit's initial master values (over its optimizer range) and initial states.
  Status InitOptimizerTiles(int unit, const std::vector<float>& master);
  // Steps every tile: acquire, step, release.
  Status StepTiles(const OptimizerHyper& hyper, float grad_scale);
  Status StepTilesPass(const OptimizerHyper& hyper, float grad_scale);
  OffloadDevice optimizer_offload() const {
    return config_.zero_optimization.offload_optimizer.device;
  }
  MemoryTier GradTier() const;
  MemoryTier ParamTier() const;
  PinMode OptimizerPin() const;
  PinMode ParamPin() const;
  // A unit's parameters or gradients: device memory, or host memory pinned as `pin` says.
  StatusOr<TieredBuffer> AllocArray(int64_t elements, MemoryTier tier, PinMode pin,
                                    MemoryCategory category, const std::string& what, int unit);
  bool params_on_nvme() const {
    return config_.zero_optimization.offload_param.device == OffloadDevice::kNvme;
  }
  NvmeStoreOptions NvmeOptions(const OffloadConfig& offload, const std::string& what) const;
  // offload_param nvme: one slot per unit holding this rank's parameter shard.
  Status CreateParamStore();
  OptimizerHyper Hyper(double lr) const;
  // The schedule's (beta1, beta2) for `hyper`'s step when it moves them (OneCycle), else none.
  std::optional<std::array<double, 2>> ScheduledBetas(const OptimizerHyper& hyper) const;
  int GroupIndex(const ParamSpec& param) const;
  Status CheckParamGroups() const;
  std::vector<GroupHyper> GroupHypers(const OptimizerHyper& hyper) const;
  StateDType state_dtype() const;
  // How every unit's optimizer step prefetches and stores param_out (step_memory_plan.h).
  StepMemoryPlan PlanStepMemory(const OptimizerHyper& hyper) const;
  int64_t MicroBatchesPending() const;

  // Not owned (Create's `trace`), may be null; the engine's tracks in it.
  TraceRecorder* trace_ = nullptr;
  const EngineParallelism parallel_;
  int track_compute_ = -1, track_gather_ = -1, track_reduce_ = -1, track_step_ = -1,
      track_optimizer_ = -1;
  const EngineConfig config_;
  const ModelSpec model_;
  Device& device_;
  Communicator& dp_;
  const DType dtype_;
  LossScaler scaler_;
  std::unique_ptr<LrSchedule> schedule_;
  CpuOptimizer optimizer_;
  int64_t step_ = 0;
  // [Note: frozen units]: the parameter group (ShardSegment::group) of the frozen parameters of
  // mixed units: lr 0, after optimizer.params' group 0 and the config's param_groups; -1 when
  // the model has no mixed unit.
  int frozen_group_ = -1;
  int micro_batch_ = 0;  // SetMicroBatch's
  bool prepared_ = false;  // between PrepareStep and FinishStep
  bool evaluating_ = false;  // between BeginEvaluation and EndEvaluation
  int64_t eval_passes_ = 0;  // EndEvaluation calls that succeeded
  std::chrono::steady_clock::time_point step_start_;
  std::unique_ptr<Communicator> gather_comm_;
  std::unique_ptr<Communicator> reduce_comm_;
  std::vector<UnitState> units_;
  std::vector<OrderedReduction> ordered_;  // [Note: unused units]; by first backward
  std::vector<OptimizerTile> tiles_;
  std::unique_ptr<ShardStore> states_;
  std::unique_ptr<TileCopyPipeline> copies_;
  std::unique_ptr<ShardStore> param_store_;    // offload_param nvme only
  std::unique_ptr<ShardSource> param_source_;  // param_store_ as the gatherer's shard source
  SlotView param_slot_;                        // StepTiles: the unit's shard being written
  // The first error of a StepTiles pass: tiles, stores and copies may be left mid-pass, so
  // Step and the master's readers return it (kAborted) from then on.
  Status tiles_broken_;
  Status TilesUsable() const;
  // Checkpoints (zero_engine_state.cc): FailedPrecondition unless between steps (`what`: "the
  // state is saved"), and how the optimizer states are coded.
  Status CheckpointBoundary(std::string_view what) const;
  struct StateCodes {
    int num_states = 0;
    StateDType type = StateDType::kF32;
    int64_t code_bytes = 0;
    std::string dtype_name;  // "f32", "bf16", "int8"
  };
  StateCodes CheckpointCodes() const;
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<GatherCoordinator> gatherer_;  // stage 3 only

 private:
  int stage() const { return config_.zero_optimization.stage; }
  StatusOr<DeviceBuffer> Alloc(int64_t elements, DType type, MemoryCategory category,
                               const std::string& what, int unit);
  // A span "<what> <name>" on `track`, or nothing (and no string built) when not tracing.
  TraceRecorder::Span Traced(int track, std::string_view what, std::string_view name = {}) const {
    if (trace_ == nullptr) return {};
    return trace_->Begin(track,
                         name.empty() ? std::string(what) : fmt::format("{} {}", what, name));
  }
  Status CheckUnit(int unit) const;
};

}  // namespace zs
