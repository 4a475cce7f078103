#include "runtime/parallel/gpt/grid_gpt.h"

#include <fmt/format.h>

namespace zs::parallel {
namespace {

// One double from every rank of `comm`, in rank order (bit for bit, as two f32 elements).
StatusOr<std::vector<double>> AllGatherDouble(Communicator& comm, double local) {
  std::vector<double> all(size_t(comm.size()), 0.0);
  all[size_t(comm.rank())] = local;
  ZS_RETURN_IF_ERROR(comm.AllGather(&all[size_t(comm.rank())], all.data(), 2, DType::kF32));
  return all;
}

}  // namespace

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
    return InvalidArgumentError(fmt::format(
        "virtual stages {} need the interleaved schedule, not '{}'", options.virtual_stages,
        ScheduleKindName(options.schedule)));
  }
  ZS_ASSIGN_OR_RETURN(g->model_, tp::TpGpt::Create(options.model, groups.tp(), tracker));
  const tp::TpGpt& model = *g->model_;
  const std::vector<double> costs = UnitParamCosts(model.full_spec());
  auto partition = PartitionVirtualStages(costs, pp, options.virtual_stages);
  if (!partition.ok()) {
    return partition.status().WithContext(fmt::format(
        "partitioning the GPT's {} units (embed, {} blocks, head) over pp={} x {} virtual "
        "stage(s)",
        costs.size(), options.model.gpt.layers, pp, options.virtual_stages));
  }
  g->partition_ = *std::move(partition);
  ZS_ASSIGN_OR_RETURN(PipelineSchedule schedule,
                      BuildSchedule(options.schedule, pp, micro_batches, options.virtual_stages));
  for (int c : g->partition_.ChunksOfRank(pp_rank)) {
    const ChunkUnits r = g->partition_.chunks[size_t(c)];
    for (int u = r.begin; u < r.end; ++u) g->units_.push_back(u);
  }
  ZS_ASSIGN_OR_RETURN(ModelSpec subset, SubsetSpec(model.spec(), g->units_));

  EngineParallelism parallel;
  parallel.model_parallel = &groups.model_parallel();
  parallel.tp_rank = groups.coord().tp;
  // 1F1B on one stage is the plain forward-backward order; anything else interleaves
  // micro-batches on a unit ([Note: per-step reduction], zero_engine.h).
  parallel.reduce_per_step = pp > 1 || options.schedule != ScheduleKind::kOneFOneB;
  ZS_ASSIGN_OR_RETURN(g->engine_, ZeroEngine::Create(options.engine, std::move(subset),
                                                     SubsetInit(model.Init(options.seed), g->units_),
                                                     device, groups.dp(), trace, parallel));
  g->access_ = std::make_unique<SubsetUnitAccess>(model.spec(), g->units_, *g->engine_);
  if (pp > 1) {
    ZS_ASSIGN_OR_RETURN(g->tied_,
                        TiedEmbeddingLink::Create(groups.pp(), model.spec().units[0].params[0].numel()));
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
    g->chunks_.push_back(std::make_unique<GptChunk>(model, *g->access_, chunk_options, data,
                                                    g->tied_.get(), tracker));
    chunks.push_back(g->chunks_.back().get());
  }
  PipelineRunnerOptions runner_options;
  runner_options.tracker = tracker;
  ZS_ASSIGN_OR_RETURN(g->runner_, PipelineRunner::Create(groups.pp(), std::move(schedule),
                                                         std::move(chunks), runner_options));
  return g;
}

GridGpt::~GridGpt() = default;

StatusOr<GridStepResult> GridGpt::TrainStep(const MicroBatchData& data) {
  data_ = data;
  GridStepResult result;
  ZS_ASSIGN_OR_RETURN(result.pipeline, runner_->RunStep());
  if (tied_ != nullptr) ZS_RETURN_IF_ERROR(tied_->Finish());
  ZS_ASSIGN_OR_RETURN(result.step, engine_->Step());
  // The replica's loss lives on the last stage (the same on every tp rank): tp rank 0 of the
  // last stage contributes it to the model-parallel group, then the dp group averages.
  double local = 0;
  if (!result.pipeline.losses.empty() && groups_->coord().tp == 0) {
    for (float l : result.pipeline.losses) local += double(l);
    local /= double(result.pipeline.losses.size());
  }
  ZS_ASSIGN_OR_RETURN(std::vector<double> parts,
                      AllGatherDouble(groups_->model_parallel(), local));
  double replica = 0;
  for (double p : parts) replica += p;
  ZS_ASSIGN_OR_RETURN(result.loss, engine_->AllReduceMean(replica));
  return result;
}

std::string GridGpt::RoleString() const {
  const GridCoord c = groups_->coord();
  const RankGrid& grid = groups_->grid();
  std::string units;
  for (int u : units_) {
    units += fmt::format("{}{}", units.empty() ? "" : " ", model_->spec().units[size_t(u)].name);
  }
  return fmt::format("tp {}/{}, pp {}/{} ({}), dp {}/{}", c.tp, grid.tp_size(), c.pp,
                     grid.pp_size(), units, c.dp, grid.dp_size());
}

int64_t GridGpt::activation_peak_bytes() const {
  int64_t total = 0;
  for (const auto& c : chunks_) total += c->peak_activation_bytes();
  return total;
}

}  // namespace zs::parallel
