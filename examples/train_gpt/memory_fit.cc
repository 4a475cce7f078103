#include "examples/train_gpt/memory_fit.h"

#include <fmt/format.h>
#include <unistd.h>

#include "runtime/parallel/pipeline/pipeline_schedule.h"
#include "runtime/plan/cluster_plan.h"

namespace zs {

Status CheckMemoryFits(const Args& args, const EngineConfig& config, int64_t vocab,
                       const LaunchInfo& launch, int dp_size) {
  StatusOr<ScheduleKind> schedule = ParseScheduleKind(args.schedule);
  if (!schedule.ok()) return OkStatus();  // refused with its flag where the grid is built
  GptShape shape;
  shape.layers = args.layers;
  shape.hidden = args.hidden;
  shape.heads = args.heads;
  shape.vocab = vocab;
  shape.seq = args.seq;
  shape.micro_batch = config.train_micro_batch_size_per_gpu;
  shape.experts = args.experts;
  shape.top_k = args.top_k;
  shape.capacity_factor = args.capacity_factor;
  PlanChoice choice;
  choice.grid = {args.tp, args.pp, dp_size, *schedule, args.virtual_stages, args.sequence_parallel};
  choice.grid.ep = args.ep;
  choice.stage = config.zero_optimization.stage;
  choice.offload = OffloadChoiceOf(config.zero_optimization);
  choice.recompute = args.recompute;
  choice.reduce_bucket_size = config.zero_optimization.reduce_bucket_size;
  ClusterSpec cluster;
  cluster.devices = choice.grid.world();
  cluster.devices_per_node = cluster.devices;
  cluster.device_memory = 1e18;  // the check is ours, below
  cluster.host_memory = 1e18;
  cluster.nvme = 1e18;
  StatusOr<PlanRow> row =
      PlanGpt(shape, config, choice, int(config.gradient_accumulation_steps), cluster);
  if (!row.ok()) return OkStatus();  // the model refuses such sizes itself, naming them
  const double per_rank = double(row->device_bytes) + double(row->host_bytes);
  const int ranks_here = launch.world_size > 1 ? launch.local_size : args.world;
  const double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  double activations = 0;
  for (int t = 0; t < kNumMemoryTiers; ++t) {
    activations += double(row->worst.Peak(MemoryTier(t), MemoryCategory::kActivations));
  }
  if (per_rank * ranks_here > physical) {
    return OutOfMemoryError(fmt::format(
        "this run needs about {} per rank at its peak (the busiest rank's parameters, "
        "gradients, optimizer states and buffers, and {} of activations for micro-batches of "
        "{} x {} tokens), {} for the {} rank(s) on this host, which has {} of memory. Lower "
        "--micro-batch, --seq, --layers or --hidden, or raise the ZeRO stage or offload "
        "(zero-plan prints the breakdown)",
        FormatGB(per_rank), FormatGB(activations), shape.micro_batch, shape.seq,
        FormatGB(per_rank * ranks_here), ranks_here, FormatGB(physical)));
  }
  return OkStatus();
}

}  // namespace zs
