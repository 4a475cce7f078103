// GridGpt: one rank's part of a GPT trained on a tp x pp x dp grid: the tensor-parallel model
// (TpGpt over the tp group), its pipeline chunks (GptChunk) run by a PipelineRunner over the
// pp group, and one ZeroEngine holding this pp rank's units sharded over the dp group. ZeRO
// stays data-parallel only; the engine learns about the rest through EngineParallelism (the
// global norm over the model-parallel group), and the chunks name each bracket's micro-batch
// (UnitAccess::SetMicroBatch) so that it reduces per micro-batch under pipelines.
//
// Contract
// - Create is collective over the world behind `groups` (every rank calls it with the same
//   options). The segments (embed, L layers, head) are partitioned over pp x virtual_stages
//   chunks (PartitionVirtualStages) by the costs `partition` names: parameter count (the
//   default), seconds measured by a one-layer probe at Create (segment_cost_probe.h: collective
//   over the world, the same costs on every rank; dense models only, Unimplemented with
//   experts), or `segment_costs` given by the caller (InvalidArgument unless there is one
//   finite, non-negative cost per segment); segment_costs() and PartitionString() show what
//   was used. Measured costs vary from run to run, and so may the partition (and with it the
//   order of the gradient norm's sums over stages): to repeat a run bit for bit, pass its
//   segment_costs() as explicit costs. This rank's engine holds the units of its chunks
//   (SubsetSpec) initialized from TpGpt's Init(seed), i.e. its slice of nn::Gpt's. With pp > 1 a
//   TiedEmbeddingLink carries wte between the first and the last stage.
// - TrainStep runs gradient_accumulation_steps micro-batches through the schedule, then the
//   engine's Step(). `data(micro_batch, tokens, targets)` gives this dp rank's micro-batch
//   (called on the first and last stage). The returned loss is the global mean over the dp
//   group of the micro-batches' mean loss, the same value on every rank.
// - Memory is counted in `tracker` as everywhere (the engine's states, the chunks' activations,
//   the TpGpt's collective scratch, the runner's message buffers).
// - Errors: bad grids or sizes (heads, hidden or the MLP width not divisible by tp, more chunks
//   than units, an interleaved schedule whose micro-batches are not a multiple of pp) are
//   InvalidArgument naming the values; communication and hook errors are returned as they are.
// - Experts: a second engine holds this rank's "block.i.moe" units over its edp group. Both
//   engines clip with one norm: each's PrepareStep() sum, the expert engines' summed over the ep
//   group (the router counted on ep rank 0), then over the model-parallel group, in fixed order
//   (zero_engine.h, PrepareStep/FinishStep). With tp > 1 the experts are replicated over tp
//   and count on tp rank 0 ([Note: experts over tp], moe_block_mlp.h). The loss
//   reported is the language-model cross-entropy; the load-balancing loss is in the gradients
//   only.
// - Evaluate runs a forward-only pass (a held-out loss) of `micro_batches` micro-batches between
//   steps: the engines in an evaluation (ZeroEngine::BeginEvaluation: nothing staged, reduced or
//   stepped), the pipeline's forward-only schedule (PipelineRunner::RunForwardOnly), no
//   activations kept. It returns the global mean loss as TrainStep does, and changes nothing a
//   step reads: a step after it has the same bits as without it. Collective over the world;
//   `data` as for TrainStep. micro_batches < 1 is InvalidArgument (nothing run).
// - After a failed TrainStep (or Evaluate) the object is broken (its engines may be half-stepped, its
//   pipeline's messages out of order): every later TrainStep fails at once with kAborted naming
//   the first error.
// - One pp rank may hold several chunks (virtual stages), also with pp = 1: the head then reads
//   wte from this rank's engine; the TiedEmbeddingLink serves pp > 1 only.
// - Checkpoints ([Note: grid checkpoints], runtime/checkpoint/checkpoint.h): SaveCheckpoint
//   writes what this rank's engines own, each parameter placed in nn::Gpt's full parameter of
//   the same name (its TpParamLayout, this tp rank; parameters replicated over tp from tp rank
//   0 only, the router of experts from ep rank 0 only),
//   and the grid in the manifest; LoadCheckpoint reads a checkpoint saved at any tp x pp x dp,
//   stage or ep (or by a plain data-parallel nn::Gpt engine) into this grid: the next step
//   continues the saved run (bit for bit at the same grid; at another grid within float
//   summation order). Both are collective over the world, between steps only, and return the
//   first failing rank's error on every rank; a failed load leaves the engines' states
//   undefined (load again or discard the object).
// - One thread per rank. `groups`, `device`, `tracker` and `trace` must outlive the object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/comm/process_groups.h"
#include "runtime/device/device.h"
#include "runtime/engine/zero_engine.h"
#include "runtime/model/subset_unit_access.h"
#include "runtime/parallel/gpt/gpt_chunk.h"
#include "runtime/parallel/gpt/tied_embedding_link.h"
#include "runtime/parallel/pipeline/pipeline_runner.h"
#include "runtime/parallel/pipeline/stage_partition.h"
#include "runtime/parallel/gpt/tp_gpt.h"

namespace zs::parallel {

// What GridGpt weighs the segments by when it cuts the pipeline into stages.
enum class PartitionCost {
  kParams,    // parameter count (TpGpt::SegmentCosts): nothing to measure
  kMeasured,  // forward + backward seconds of each segment kind (MeasureSegmentCosts)
  kExplicit,  // GridGptOptions::segment_costs
};
std::string_view PartitionCostName(PartitionCost cost);  // "params", "measured", "explicit"
// The inverse of PartitionCostName; InvalidArgument naming the string and the choices.
StatusOr<PartitionCost> ParsePartitionCost(std::string_view name);

struct GridGptOptions {
  TpGptConfig model;
  EngineConfig engine;  // gradient_accumulation_steps = micro-batches per step
  int64_t micro_batch = 1;  // sequences per dp rank per micro-batch
  int64_t seq = 1;
  uint64_t seed = 0;
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  int virtual_stages = 1;
  bool recompute = false;
  // How the pipeline is partitioned (see the contract). Measuring runs a few forward and
  // backward passes of a one-layer model at Create (probe_repeats timed, after one warm-up).
  PartitionCost partition = PartitionCost::kParams;
  std::vector<double> segment_costs;  // kExplicit: one per segment (embed, L layers, head)
  int probe_repeats = 5;
  // Experts (model.moe.experts > 0): the expert-parallel degree. It divides dp: each dp group
  // is cut into ep groups of consecutive dp ranks; rank i of every ep group forms an
  // expert-data-parallel (edp) group, over which the experts' states are sharded.
  int ep = 1;
  // Reduce the gradients once per step instead of once per micro-batch (EngineParallelism,
  // [Note: per-step reduction]): 1/m of the dp traffic, but every unit's full fp32 gradient
  // staging held through the step at every ZeRO stage.
  bool reduce_per_step = false;
};

struct GridStepResult {
  double loss = 0;  // global mean
  StepResult step;
  PipelineStepResult pipeline;  // this rank's timings
};

class GridGpt {
 public:
  static StatusOr<std::unique_ptr<GridGpt>> Create(const GridGptOptions& options,
                                                   const ProcessGroups& groups, Device& device,
                                                   MemoryTracker* tracker,
                                                   TraceRecorder* trace = nullptr);
  ~GridGpt();

  StatusOr<GridStepResult> TrainStep(const MicroBatchData& data);
  StatusOr<double> Evaluate(const MicroBatchData& data, int micro_batches);

  ZeroEngine& engine() { return *engine_; }
  ZeroEngine* expert_engine() { return expert_engine_.get(); }  // null without expert units
  // The fp32 master values of one of this rank's parameters, by the model's unit index
  // (collective over the engine's group holding it: dp, or edp for expert units).
  StatusOr<std::vector<float>> GatherMasterParam(int unit, int param);
  // Checkpoints (see the contract). `trainer` is stored as the manifest's opaque object.
  StatusOr<std::string> SaveCheckpoint(const std::string& root,
                                       const nlohmann::json& trainer = nlohmann::json::object());
  StatusOr<CheckpointManifest> LoadCheckpoint(const std::string& path);
  // This rank's engines with their parameters' placements, and the grid's description
  // ({"tp", "pp", "dp", "ep", "virtual_stages", "sequence_parallel", "experts", "layers"}).
  CheckpointRank checkpoint_rank();
  // The engines' MasterDigest, combined (collective over dp, then edp).
  StatusOr<uint64_t> MasterDigest();
  const TpGpt& model() const { return *model_; }
  const StagePartition& partition() const { return partition_; }
  const std::vector<int>& units() const { return units_; }  // this rank's units
  // The cost of each segment the partition was computed from (the same on every rank).
  const std::vector<double>& segment_costs() const { return segment_costs_; }
  // "by measured seconds (embed 0.1 ms, block 1.2 ms, head 0.9 ms): chunk 0 (rank 0): units
  // [0, 7) cost 0.0074; chunk 1 (rank 1): ..." (units here are segments: embed, layers, head)
  std::string PartitionString() const;
  // "tp 1/2, pp 0/2 (embed block.0 block.1), dp 1/2" (and ", ep 1/2" with experts)
  std::string RoleString() const;
  // The chunks' peaks, summed, and the TpGpt's collective scratch (TpGpt::scratch_bytes).
  int64_t activation_peak_bytes() const;
  // The chunks' peaks without their fixed buffers or the tp scratch: what the micro-batches
  // in flight hold (GptChunk::peak_micro_batch_bytes), summed.
  int64_t micro_batch_peak_bytes() const;

 private:
  GridGpt() = default;
  StatusOr<GridStepResult> RunStep(const MicroBatchData& data);
  StatusOr<double> RunEvaluation(const MicroBatchData& data, int micro_batches);
  // The mean of the last stage's per-micro-batch losses, over the grid: tp rank 0 of the last
  // stage contributes it to the model-parallel group, then the dp group averages.
  StatusOr<double> GlobalMeanLoss(const std::vector<float>& last_stage_losses);
  Status Aborted() const;  // kAborted naming broken_

  const ProcessGroups* groups_ = nullptr;
  GridGptOptions options_;
  std::unique_ptr<TpGpt> model_;
  StagePartition partition_;
  std::vector<double> segment_costs_;
  std::string cost_summary_;  // how segment_costs_ came about, for PartitionString()
  std::vector<int> units_;
  std::unique_ptr<Communicator> ep_;   // experts: this rank's ep group (split from dp)
  std::unique_ptr<Communicator> edp_;  // experts: ranks holding the same experts
  std::unique_ptr<ZeroEngine> engine_;
  std::unique_ptr<ZeroEngine> expert_engine_;
  std::unique_ptr<SubsetUnitAccess> access_;
  std::vector<int> dense_units_, expert_units_;  // this rank's, by engine
  std::unique_ptr<TiedEmbeddingLink> tied_;
  std::vector<std::unique_ptr<GptChunk>> chunks_;
  std::unique_ptr<PipelineRunner> runner_;
  MicroBatchData data_;  // the current step's, read by the chunks
  Status broken_;        // the first failed step's error; OK while healthy
};

}  // namespace zs::parallel
