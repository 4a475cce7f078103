#include "runtime/parallel/gpt/grid_gpt.h"

#include <fmt/format.h>

#include "runtime/comm/all_gather_scalar.h"
#include "runtime/parallel/gpt/segment_cost_probe.h"

namespace zs::parallel {
namespace {

// The cost of each segment (embed, L layers, head) by `options.partition`, and how it came
// about in `summary`. Measuring is collective over the world.
StatusOr<std::vector<double>> SegmentCostsFor(const GridGptOptions& options, const TpGpt& model,
                                              const ProcessGroups& groups, Device& device,
                                              MemoryTracker* tracker, std::string* summary) {
  const int segments = model.num_segments();
  switch (options.partition) {
    case PartitionCost::kParams:
      *summary = "by parameter count";
      return model.SegmentCosts();
    case PartitionCost::kExplicit:
      if (int(options.segment_costs.size()) != segments) {
        return InvalidArgumentError(fmt::format(
            "explicit partition costs: {} given, the GPT has {} segments (embed, {} layers, "
            "head)",
            options.segment_costs.size(), segments, options.model.gpt.layers));
      }
      *summary = "by explicit costs";
      return options.segment_costs;
    case PartitionCost::kMeasured: {
      SegmentCostProbeOptions probe;
      probe.model = options.model;
      probe.engine = options.engine;
      probe.micro_batch = options.micro_batch;
      probe.seq = options.seq;
      probe.recompute = options.recompute;
      probe.repeats = options.probe_repeats;
      ZS_ASSIGN_OR_RETURN(SegmentKindCosts kinds,
                          MeasureSegmentCosts(probe, groups, device, tracker));
      *summary = fmt::format("by measured seconds ({})", kinds.ToString());
      return kinds.PerSegment(options.model.gpt.layers);
    }
  }
  return InvalidArgumentError(fmt::format("unknown partition cost {}", int(options.partition)));
}

}  // namespace

std::string_view PartitionCostName(PartitionCost cost) {
  switch (cost) {
    case PartitionCost::kParams:
      return "params";
    case PartitionCost::kMeasured:
      return "measured";
    case PartitionCost::kExplicit:
      return "explicit";
  }
  return "unknown";
}

StatusOr<PartitionCost> ParsePartitionCost(std::string_view name) {
  for (PartitionCost c :
       {PartitionCost::kParams, PartitionCost::kMeasured, PartitionCost::kExplicit}) {
    if (name == PartitionCostName(c)) return c;
  }
  return InvalidArgumentError(
      fmt::format("unknown partition cost '{}': expected params, measured or explicit", name));
}

StatusOr<std::unique_ptr<GridGpt>> GridGpt::Create(const GridGptOptions& options,
                                                   const ProcessGroups& groups, Device& device,
                                                   MemoryTracker* tracker, TraceRecorder* trace) {
  std::unique_ptr<GridGpt> g(new GridGpt());
  g->groups_ = &groups;
  g->options_ = options;
  const int pp = groups.grid().pp_size();
  const int pp_rank = groups.coord().pp;
  const int micro_batches = int(options.engine.gradient_accumulation_steps);
  if (options.virtual_stages != 1 && options.schedule != ScheduleKind::kInterleaved) {
    return InvalidArgumentError(
        fmt::format("virtual stages {} need the interleaved schedule, not '{}'",
                    options.virtual_stages, ScheduleKindName(options.schedule)));
  }
  const bool experts = options.model.moe.enabled();
  const int dp = groups.grid().dp_size(), dp_rank = groups.coord().dp;
  if (!experts && options.ep != 1) {
    return InvalidArgumentError(fmt::format("ep {} without experts", options.ep));
  }
  if (experts) {
    if (options.ep < 1 || dp % options.ep != 0) {
      return InvalidArgumentError(
          fmt::format("the expert-parallel degree ep {} must divide the data-parallel degree dp {}",
                      options.ep, dp));
    }
    ZS_ASSIGN_OR_RETURN(g->ep_,
                        groups.dp().Split(dp_rank / options.ep, dp_rank % options.ep, "ep"));
    ZS_ASSIGN_OR_RETURN(g->edp_,
                        groups.dp().Split(dp_rank % options.ep, dp_rank / options.ep, "edp"));
  }
  ZS_ASSIGN_OR_RETURN(g->model_, TpGpt::Create(options.model, groups.tp(), g->ep_.get(), tracker));
  const TpGpt& model = *g->model_;
  ZS_ASSIGN_OR_RETURN(g->segment_costs_,
                      SegmentCostsFor(options, model, groups, device, tracker, &g->cost_summary_));
  const std::vector<double>& costs = g->segment_costs_;
  auto partition = PartitionVirtualStages(costs, pp, options.virtual_stages);
  if (!partition.ok()) {
    return partition.status().WithContext(fmt::format(
        "partitioning the GPT's {} segments (embed, {} layers, head) over pp={} x {} virtual "
        "stage(s)",
        costs.size(), options.model.gpt.layers, pp, options.virtual_stages));
  }
  g->partition_ = *std::move(partition);
  ZS_ASSIGN_OR_RETURN(PipelineSchedule schedule,
                      BuildSchedule(options.schedule, pp, micro_batches, options.virtual_stages));
  std::vector<int> dense_units, expert_units;
  for (int c : g->partition_.ChunksOfRank(pp_rank)) {
    const ChunkUnits r = g->partition_.chunks[size_t(c)];
    for (int seg = r.begin; seg < r.end; ++seg) {
      for (int u : model.SegmentUnits(seg)) {
        g->units_.push_back(u);
        const bool expert_unit =
            experts && seg >= 1 && seg <= options.model.gpt.layers && u == model.moe_unit(seg - 1);
        (expert_unit ? expert_units : dense_units).push_back(u);
      }
    }
  }
  ZS_ASSIGN_OR_RETURN(ModelSpec subset, SubsetSpec(model.spec(), dense_units));

  EngineParallelism parallel;
  parallel.model_parallel = &groups.model_parallel();
  parallel.tp_rank = groups.coord().tp;
  // Each micro-batch's gradients are reduced at its last backward on a unit: the chunks name
  // the micro-batch of their brackets (GptChunk, UnitAccess::SetMicroBatch).
  parallel.reduce_per_step = options.reduce_per_step;
  const ParamInit init = model.Init(options.seed);
  ZS_ASSIGN_OR_RETURN(g->engine_, ZeroEngine::Create(options.engine, std::move(subset),
                                                     SubsetInit(init, dense_units), device,
                                                     groups.dp(), trace, parallel));
  std::vector<SubsetUnitAccess::Backing> backings = {{dense_units, g->engine_.get()}};
  if (!expert_units.empty()) {
    ZS_ASSIGN_OR_RETURN(ModelSpec expert_spec, SubsetSpec(model.spec(), expert_units));
    EngineParallelism expert_parallel;
    expert_parallel.ep_rank = g->ep_->rank();  // the router counts on ep rank 0
    // [Note: experts over tp] (moe_block_mlp.h): every tp rank holds the same experts
    // with the same gradients; they count in the norm on tp rank 0 only.
    expert_parallel.model_parallel = parallel.model_parallel;
    expert_parallel.tp_rank = groups.coord().tp;
    expert_parallel.reduce_per_step = parallel.reduce_per_step;
    // The expert engine shards over the expert-data-parallel group (dp / ep ranks): the job's
    // train_batch_size is counted over dp, and the dense engine checks it.
    EngineConfig expert_config = options.engine;
    expert_config.train_batch_size = 0;
    ZS_ASSIGN_OR_RETURN(
        g->expert_engine_,
        ZeroEngine::Create(expert_config, std::move(expert_spec), SubsetInit(init, expert_units),
                           device, *g->edp_, nullptr, expert_parallel));
    backings.push_back({expert_units, g->expert_engine_.get()});
  }
  g->access_ = std::make_unique<SubsetUnitAccess>(model.spec(), std::move(backings));
  g->dense_units_ = dense_units;
  g->expert_units_ = expert_units;
  if (pp > 1) {
    ZS_ASSIGN_OR_RETURN(
        g->tied_,
        TiedEmbeddingLink::Create(groups.pp(), model.spec().units[0].params[0].numel(), tracker));
  }
  GridGpt* self = g.get();
  MicroBatchData data = [self](int mb, std::span<int32_t> tokens, std::span<int32_t> targets) {
    return self->data_(mb, tokens, targets);
  };
  std::vector<PipelineChunk*> chunks;
  for (int c : g->partition_.ChunksOfRank(pp_rank)) {
    const ChunkUnits r = g->partition_.chunks[size_t(c)];
    GptChunkOptions chunk_options;
    chunk_options.begin = r.begin;
    chunk_options.end = r.end;
    chunk_options.batch = options.micro_batch;
    chunk_options.seq = options.seq;
    chunk_options.recompute = options.recompute;
    chunk_options.wte_local = g->access_->holds(TpGpt::kEmbedUnit);
    g->chunks_.push_back(std::make_unique<GptChunk>(model, *g->access_, chunk_options, data,
                                                    g->tied_.get(), tracker));
    chunks.push_back(g->chunks_.back().get());
  }
  PipelineRunnerOptions runner_options;
  runner_options.tracker = tracker;
  runner_options.trace = trace;
  ZS_ASSIGN_OR_RETURN(g->runner_, PipelineRunner::Create(groups.pp(), std::move(schedule),
                                                         std::move(chunks), runner_options));
  return g;
}

GridGpt::~GridGpt() = default;

Status GridGpt::Aborted() const {
  return AbortedError(
      fmt::format("GridGpt: an earlier step failed ({}); this rank's model is no longer "
                  "consistent with its peers'",
                  broken_.ToString()));
}

StatusOr<GridStepResult> GridGpt::TrainStep(const MicroBatchData& data) {
  if (!broken_.ok()) return Aborted();
  StatusOr<GridStepResult> result = RunStep(data);
  if (!result.ok()) broken_ = result.status();
  return result;
}

StatusOr<double> GridGpt::Evaluate(const MicroBatchData& data, int micro_batches) {
  if (!broken_.ok()) return Aborted();
  if (micro_batches < 1) {
    return InvalidArgumentError(fmt::format(
        "GridGpt::Evaluate: {} micro-batches; an evaluation needs at least one", micro_batches));
  }
  StatusOr<double> loss = RunEvaluation(data, micro_batches);
  if (!loss.ok()) broken_ = loss.status().WithContext("evaluating");
  return loss;
}

StatusOr<double> GridGpt::RunEvaluation(const MicroBatchData& data, int micro_batches) {
  data_ = data;
  ZS_RETURN_IF_ERROR(engine_->BeginEvaluation());
  if (expert_engine_ != nullptr) ZS_RETURN_IF_ERROR(expert_engine_->BeginEvaluation());
  StatusOr<PipelineStepResult> pass = runner_->RunForwardOnly(micro_batches);
  ZS_RETURN_IF_ERROR(pass.status());
  if (tied_ != nullptr) ZS_RETURN_IF_ERROR(tied_->Finish());
  ZS_RETURN_IF_ERROR(engine_->EndEvaluation());
  if (expert_engine_ != nullptr) ZS_RETURN_IF_ERROR(expert_engine_->EndEvaluation());
  return GlobalMeanLoss(pass->losses);
}

StatusOr<double> GridGpt::GlobalMeanLoss(const std::vector<float>& last_stage_losses) {
  // The replica's loss lives on the last stage (the same on every tp rank): tp rank 0 of the
  // last stage contributes it to the model-parallel group, then the dp group averages.
  double local = 0;
  if (!last_stage_losses.empty() && groups_->coord().tp == 0) {
    for (float l : last_stage_losses) local += double(l);
    local /= double(last_stage_losses.size());
  }
  ZS_ASSIGN_OR_RETURN(const double replica, AllSumScalar(groups_->model_parallel(), local));
  return engine_->AllReduceMean(replica);
}

StatusOr<GridStepResult> GridGpt::RunStep(const MicroBatchData& data) {
  data_ = data;
  GridStepResult result;
  ZS_ASSIGN_OR_RETURN(result.pipeline, runner_->RunStep());
  if (tied_ != nullptr) ZS_RETURN_IF_ERROR(tied_->Finish());
  if (expert_engine_ == nullptr) {
    ZS_ASSIGN_OR_RETURN(result.step, engine_->Step());
  } else {
    // One norm over both engines ([Note: one norm over the grid], PrepareStep in zero_engine.h):
    // the expert sums over ep in its rank order, then the replica over the model-parallel group.
    ZS_ASSIGN_OR_RETURN(const double dense, engine_->PrepareStep());
    ZS_ASSIGN_OR_RETURN(const double expert, expert_engine_->PrepareStep());
    ZS_ASSIGN_OR_RETURN(const double experts, AllSumScalar(*ep_, expert));
    ZS_ASSIGN_OR_RETURN(const double total,
                        AllSumScalar(groups_->model_parallel(), dense + experts));
    ZS_ASSIGN_OR_RETURN(result.step, engine_->FinishStep(total));
    ZS_RETURN_IF_ERROR(expert_engine_->FinishStep(total).status());
  }
  ZS_ASSIGN_OR_RETURN(result.loss, GlobalMeanLoss(result.pipeline.losses));
  return result;
}

StatusOr<std::vector<float>> GridGpt::GatherMasterParam(int unit, int param) {
  for (size_t i = 0; i < dense_units_.size(); ++i) {
    if (dense_units_[i] == unit) return engine_->GatherMasterParam(int(i), param);
  }
  for (size_t i = 0; i < expert_units_.size(); ++i) {
    if (expert_units_[i] == unit) return expert_engine_->GatherMasterParam(int(i), param);
  }
  return InvalidArgumentError(
      fmt::format("unit {} is not held by pipeline stage {}", unit, groups_->coord().pp));
}

StatusOr<uint64_t> GridGpt::MasterDigest() {
  ZS_ASSIGN_OR_RETURN(uint64_t digest, engine_->MasterDigest());
  if (expert_engine_ != nullptr) {
    ZS_ASSIGN_OR_RETURN(uint64_t experts, expert_engine_->MasterDigest());
    digest = digest * 0x100000001b3ull ^ experts;
  }
  return digest;
}

CheckpointRank GridGpt::checkpoint_rank() {
  const GridCoord c = groups_->coord();
  const RankGrid& grid = groups_->grid();
  CheckpointRank out;
  out.world = &groups_->world();
  out.grid = {{"tp", grid.tp_size()},
              {"pp", grid.pp_size()},
              {"dp", grid.dp_size()},
              {"ep", options_.ep},
              {"virtual_stages", options_.virtual_stages},
              {"sequence_parallel", options_.model.sequence_parallel},
              {"experts", options_.model.moe.experts},
              {"layers", options_.model.gpt.layers}};
  // A parameter replicated over tp is saved by tp rank 0 only; one replicated over ep (the
  // router, ParamSpec::expert_parallel false in an expert unit) by ep rank 0 only: the rank
  // files then hold every element once.
  auto add = [&](ZeroEngine* engine, Communicator* dp, const std::vector<int>& units,
                 int ep_rank) {
    CheckpointEngine e;
    e.engine = engine;
    e.dp = dp;
    e.model_units = units;
    for (int u : units) {
      const UnitSpec& unit = model_->spec().units[size_t(u)];
      std::vector<ParamPlacement>& ps = e.placements.emplace_back();
      for (size_t p = 0; p < unit.params.size(); ++p) {
        ParamPlacement place;
        place.name = unit.name + "." + unit.params[p].name;
        place.layout = model_->layout(u, int(p));
        place.tp_rank = c.tp;
        place.tp_size = grid.tp_size();
        place.saved = (place.layout.tensor_parallel() || c.tp == 0) &&
                      (unit.params[p].expert_parallel || ep_rank == 0);
        ps.push_back(std::move(place));
      }
    }
    out.engines.push_back(std::move(e));
  };
  add(engine_.get(), &groups_->dp(), dense_units_, 0);
  if (expert_engine_ != nullptr) {
    add(expert_engine_.get(), edp_.get(), expert_units_, ep_ != nullptr ? ep_->rank() : 0);
  }
  return out;
}

StatusOr<std::string> GridGpt::SaveCheckpoint(const std::string& root,
                                              const nlohmann::json& trainer) {
  if (!broken_.ok()) return Aborted();
  return zs::SaveCheckpoint(checkpoint_rank(), root, trainer);
}

StatusOr<CheckpointManifest> GridGpt::LoadCheckpoint(const std::string& path) {
  if (!broken_.ok()) return Aborted();
  return zs::LoadCheckpoint(checkpoint_rank(), path);
}

std::string GridGpt::PartitionString() const {
  return fmt::format("{}: {}", cost_summary_, partition_.ToString());
}

std::string GridGpt::RoleString() const {
  const GridCoord c = groups_->coord();
  const RankGrid& grid = groups_->grid();
  std::string units;
  for (int u : units_) {
    units += fmt::format("{}{}", units.empty() ? "" : " ", model_->spec().units[size_t(u)].name);
  }
  return fmt::format("tp {}/{}, pp {}/{} ({}), dp {}/{}{}", c.tp, grid.tp_size(), c.pp,
                     grid.pp_size(), units, c.dp, grid.dp_size(),
                     ep_ != nullptr ? fmt::format(", ep {}/{}", ep_->rank(), ep_->size()) : "");
}

int64_t GridGpt::micro_batch_peak_bytes() const {
  int64_t total = 0;
  for (const auto& c : chunks_) total += c->peak_micro_batch_bytes();
  return total;
}

int64_t GridGpt::activation_peak_bytes() const {
  int64_t total = model_->scratch_bytes();  // it only grows: its peak is its size now
  for (const auto& c : chunks_) total += c->peak_activation_bytes();
  return total;
}

}  // namespace zs::parallel
