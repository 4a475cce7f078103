// zero-plan: per-rank memory of a model on a cluster for each ZeRO stage and offload choice,
// from the runtime's real layout code on a counting device (runtime/plan), and the
// configuration with the least overhead that fits.
//
//   zero-plan --params 7.5e9 --dp 64                  the ZeRO paper's table beside the layout
//   zero-plan --layers 128 --hidden 25600 --heads 160 --devices 1024 [--tp 8 --pp 16] ...
//   zero-plan --layers 24 --hidden 2048 --heads 16 --devices 16 --experts 16 --ep 8 ...  (MoE)
//
// Every flag is documented in --help. Exit codes: 0 done, 1 planning failed, 2 bad arguments.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>

#include "runtime/engine/engine_config.h"
#include "runtime/plan/cluster_plan.h"

namespace {

int Fail(const zs::Status& s) {
  std::fprintf(stderr, "zero-plan: %s\n", s.message().c_str());
  return s.code() == zs::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "zero-plan: what each rank of a model holds, by memory tier (device, pinned_host, host, "
      "nvme) and category (parameters, gradients, optimizer_states, comm_buffers, "
      "gathered_parameters, activations), for each ZeRO stage and offload choice, counted by "
      "the runtime's own layout, bucket, gather and offload code on a device that only counts. "
      "Sizes in GB are 1e9 bytes.\n"
      "Quick form: --params N --dp D prints the ZeRO paper's per-stage figures for "
      "mixed-precision Adam beside the real layout. Model form: --layers/--hidden/--heads with "
      "--devices plans a GPT on the cluster and recommends a configuration."};
  app.set_help_flag("-h,--help", "print this help");
  double params = 0;
  int64_t unit_hidden = 4096;
  zs::GptShape shape;
  shape.vocab = 50257;
  shape.seq = 2048;
  zs::ClusterSpec cluster;
  double device_gb = 80, host_gb = 1024, nvme_gb = 0;
  int tp = 1, pp = 1, dp = 0, micro_batches = 0;
  std::string precision = "bf16", optimizer = "adamw", state_dtype = "fp32", config_path;
  std::string stage_filter = "all";
  bool recompute_only = false, no_recompute = false, no_recommend = false;

  app.add_option("--params", params,
                 "quick form: a model of this many parameters (e.g. 7.5e9), no shape needed")
      ->check(CLI::PositiveNumber);
  app.add_option("--unit-hidden", unit_hidden,
                 "quick form: units are transformer layers of this hidden size "
                 "(12 h^2 + 13 h parameters each; default 4096)")
      ->check(CLI::PositiveNumber);
  app.add_option("--layers", shape.layers, "GPT: transformer layers");
  app.add_option("--hidden", shape.hidden, "GPT: hidden size");
  app.add_option("--heads", shape.heads, "GPT: attention heads (divisible by --tp)");
  app.add_option("--vocab", shape.vocab, "GPT: vocabulary size (default 50257)");
  app.add_option("--seq", shape.seq, "GPT: sequence length (default 2048)");
  app.add_option("--micro-batch", shape.micro_batch,
                 "GPT: sequences per micro-batch per data-parallel rank (default 1)");
  app.add_option("--micro-batches", micro_batches,
                 "GPT: micro-batches per step (gradient accumulation / pipeline; default: pp)");
  app.add_option("--precision", precision, "compute dtype of parameters and gradients (default bf16)")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  app.add_option("--optimizer", optimizer, "optimizer, whose states are planned (default adamw)")
      ->check(CLI::IsMember({"adamw", "adam", "sgd", "adagrad", "lion"}));
  app.add_option("--state-dtype", state_dtype, "optimizer state dtype; the master stays fp32 (default fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "int8"}));
  app.add_option("--config", config_path,
                 "a DeepSpeed-style JSON config for everything else (buckets, prefetch, "
                 "alignment, ...); the planner varies stage, offload and bucket size over it");
  app.add_option("--devices", cluster.devices, "GPT: devices in the cluster (= tp x pp x dp)");
  app.add_option("--device-memory", device_gb, "memory per device in GB (default 80)");
  app.add_option("--host-memory", host_gb, "host memory per node in GB (default 1024)");
  app.add_option("--nvme", nvme_gb, "NVMe capacity per node in GB (default 0: none)");
  app.add_option("--devices-per-node", cluster.devices_per_node,
                 "devices per node (default 8): host and NVMe are shared by them; tp stays "
                 "within a node");
  app.add_option("--tp", tp, "tensor-parallel size of the table (default 1)");
  app.add_option("--pp", pp, "pipeline-parallel size of the table (default 1)");
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  app.add_option("--schedule", schedule,
                 "pipeline schedule of the table: gpipe, 1f1b or interleaved (default 1f1b; the "
                 "recommendation considers 1f1b)");
  app.add_option("--virtual-stages", virtual_stages,
                 "chunks per pipeline rank of the table (interleaved only; default 1)");
  bool sequence_parallel = false;
  app.add_flag("--sequence-parallel", sequence_parallel,
               "the table's activations with Megatron's sequence parallelism over tp");
  int ep = 1;
  app.add_option("--experts", shape.experts,
                 "GPT: mixture of experts: this many experts of the MLP's shape replace every "
                 "block's MLP (train_gpt's flag; default 0: dense)");
  app.add_option("--ep", ep,
                 "expert-parallel degree (divides dp and --experts): a rank holds experts / ep "
                 "experts, sharded over dp / ep ranks (default 1)");
  app.add_option("--top-k", shape.top_k, "experts per token: 1 or 2 (default 2)");
  app.add_option("--capacity-factor", shape.capacity_factor,
                 "each expert keeps at most ceil(k x tokens x factor / experts) of a rank's "
                 "tokens per micro-batch; the planned activations are those of full experts "
                 "(default 1.25)");
  app.add_option("--dp", dp,
                 "data-parallel size (quick form: required; GPT: default devices / (tp x pp))");
  app.add_option("--stage", stage_filter, "table rows: one ZeRO stage (0-3) or all")
      ->check(CLI::IsMember({"0", "1", "2", "3", "all"}));
  auto* rc = app.add_flag("--recompute", recompute_only, "table rows: with recompute only");
  auto* nrc = app.add_flag("--no-recompute", no_recompute, "table rows: without recompute only");
  rc->excludes(nrc);
  app.add_flag("--no-recommend", no_recommend, "GPT: print the table only");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  zs::EngineConfig base;
  if (!config_path.empty()) {
    auto loaded = zs::LoadEngineConfig(config_path);
    if (!loaded.ok()) {
      return Fail(zs::InvalidArgumentError(
          fmt::format("--config {}: {}", config_path, loaded.status().message())));
    }
    base = *loaded;
  }
  if (app.count("--precision") > 0 || config_path.empty()) {
    base.bf16.enabled = precision == "bf16";
    base.fp16.enabled = precision == "fp16";
  }
  if (app.count("--optimizer") > 0) {
    using zs::OptimizerType;
    base.optimizer.type = optimizer == "adamw"  ? OptimizerType::kAdamW
                          : optimizer == "adam" ? OptimizerType::kAdam
                          : optimizer == "sgd"  ? OptimizerType::kSgd
                          : optimizer == "lion" ? OptimizerType::kLion
                                                : OptimizerType::kAdagrad;
    if (optimizer == "sgd") base.optimizer.momentum = 0.9;
  }
  if (app.count("--state-dtype") > 0) {
    base.zerostack.optimizer_state_dtype = state_dtype == "fp32"   ? zs::OptimizerStateType::kF32
                                           : state_dtype == "bf16" ? zs::OptimizerStateType::kBF16
                                                                   : zs::OptimizerStateType::kInt8;
  }
  const auto start = std::chrono::steady_clock::now();

  if (params > 0) {
    if (app.count("--layers") > 0 || app.count("--devices") > 0) {
      return Fail(zs::InvalidArgumentError(fmt::format(
          "--params {} is the quick form: give no --layers or --devices with it", params)));
    }
    if (dp < 1) {
      return Fail(zs::InvalidArgumentError(
          fmt::format("--dp {}: the quick form needs --dp >= 1 (data-parallel ranks)", dp)));
    }
    auto rows = zs::PaperTable(params, dp, base, unit_hidden);
    if (!rows.ok()) return Fail(rows.status());
    std::printf("%s", zs::FormatPaperTable(params, dp, *rows).c_str());
    for (const zs::PaperRow& r : *rows) {
      std::printf("\nstage %d, one rank's peak by tier and category:\n%s", r.stage,
                  zs::FormatRankBreakdown(r.real).c_str());
    }
    return 0;
  }
  if (app.count("--layers") == 0 || app.count("--hidden") == 0 || app.count("--heads") == 0) {
    return Fail(zs::InvalidArgumentError(
        "give --params N --dp D (quick form), or --layers, --hidden and --heads (GPT form); "
        "see --help"));
  }
  if (app.count("--devices") == 0) cluster.devices = std::max(1, tp * pp * std::max(dp, 1));
  cluster.device_memory = device_gb * 1e9;
  cluster.host_memory = host_gb * 1e9;
  cluster.nvme = nvme_gb * 1e9;
  if (auto s = zs::CheckCluster(cluster); !s.ok()) return Fail(s);
  if (tp < 1) return Fail(zs::InvalidArgumentError(fmt::format("--tp {} must be >= 1", tp)));
  if (pp < 1) return Fail(zs::InvalidArgumentError(fmt::format("--pp {} must be >= 1", pp)));
  if (dp == 0) {
    if (cluster.devices % (tp * pp) != 0) {
      return Fail(zs::InvalidArgumentError(fmt::format(
          "--devices {} is not divisible by --tp {} x --pp {}", cluster.devices, tp, pp)));
    }
    dp = cluster.devices / (tp * pp);
  }
  if (micro_batches == 0) micro_batches = pp;
  auto schedule_kind = zs::ParseScheduleKind(schedule);
  if (!schedule_kind.ok()) return Fail(schedule_kind.status().WithContext("--schedule"));
  zs::GridShape grid{tp, pp, dp, *schedule_kind, virtual_stages, sequence_parallel};
  grid.ep = ep;

  std::printf(
      "GPT: %d layers, hidden %lld, heads %lld, vocab %lld, seq %lld, micro-batch %lld: "
      "%.4g parameters%s; %d devices of %s, %d per node (host %s, NVMe %s per node)\n\n",
      shape.layers, (long long)shape.hidden, (long long)shape.heads, (long long)shape.vocab,
      (long long)shape.seq, (long long)shape.micro_batch, double(zs::GptParameterCount(shape)),
      shape.experts > 0
          ? fmt::format(" ({} experts per block, {:.4g} in experts and routers; top-{}, capacity "
                        "factor {:g}, ep {})",
                        shape.experts, double(zs::GptExpertParameterCount(shape)), shape.top_k,
                        shape.capacity_factor, ep)
                .c_str()
          : "",
      cluster.devices, zs::FormatGB(cluster.device_memory).c_str(), cluster.devices_per_node,
      zs::FormatGB(cluster.host_memory).c_str(), zs::FormatGB(cluster.nvme).c_str());
  std::printf(
      "Per-rank peak (the largest pipeline stage's rank) at tp %d x pp %d x dp %d, %d "
      "micro-batches per step (%s schedule%s):\n",
      tp, pp, dp, micro_batches, schedule.c_str(),
      virtual_stages > 1 ? fmt::format(", {} virtual stages", virtual_stages).c_str() : "");
  bool header = true;
  const zs::OffloadChoice offloads[] = {
      zs::OffloadChoice::kNone, zs::OffloadChoice::kCpuOptimizer, zs::OffloadChoice::kCpuAll,
      zs::OffloadChoice::kNvmeOptimizer, zs::OffloadChoice::kNvmeAll};
  for (int rcv = 0; rcv < 2; ++rcv) {
    if ((rcv == 1 && no_recompute) || (rcv == 0 && recompute_only)) continue;
    for (int stage = 0; stage <= 3; ++stage) {
      if (stage_filter != "all" && std::stoi(stage_filter) != stage) continue;
      for (zs::OffloadChoice o : offloads) {
        if (!zs::OffloadAllowed(o, stage)) continue;
        zs::PlanChoice c{grid, stage, o, rcv == 1, base.zero_optimization.reduce_bucket_size};
        auto row = zs::PlanGpt(shape, base, c, micro_batches, cluster);
        if (!row.ok()) return Fail(row.status());
        std::printf("%s", zs::FormatPlanRow(*row, header).c_str());
        header = false;
      }
    }
  }
  for (bool recompute : {false, true}) {
    auto stages = zs::GptStages(shape, grid, recompute, micro_batches);
    if (!stages.ok()) return Fail(stages.status());
    int64_t most = 0;
    for (const zs::StageModel& s : *stages) most = std::max(most, s.activation_bytes);
    std::printf(
        "%s activations, largest stage: %s as our fp32 CPU model keeps them (full "
        "attention probabilities); Megatron's formula (fp16): %s\n",
        recompute ? "with recompute:   " : "without recompute:", zs::FormatGB(double(most)).c_str(),
        zs::FormatGB(zs::MegatronActivationBytes(shape, grid, recompute, micro_batches)).c_str());
  }
  if (!no_recommend) {
    auto rec = zs::Recommend(shape, base, micro_batches, cluster, ep);
    if (!rec.ok()) return Fail(rec.status());
    std::printf("\n%s\n", rec->why.c_str());
    if (rec->found) {
      std::printf("Its largest rank (%s):\n%s", rec->best.worst_segments.c_str(),
                  zs::FormatRankBreakdown(rec->best.worst).c_str());
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\nplanned in %.2f s\n", seconds);
  return 0;
}
