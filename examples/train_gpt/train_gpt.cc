// train_gpt: trains a character-level GPT (runtime/nn) on a text corpus with the ZeroEngine.
//
//   build/bin/train_gpt --config examples/train_gpt/configs/zero3.json --world 4 --steps 200
//   build/bin/zerorun -n 4 build/bin/train_gpt --config ...      (ranks as processes, fabric)
//
// Ranks are threads of this process over the `local` backend (--world N), or processes under a
// launcher (zerorun, mpirun, srun) over `fabric`. The data order depends only on --seed and the
// global batch (micro batch x accumulation steps x world), so runs that split one global batch
// differently see the same samples every step; the loss printed is the global mean.
// --tp and --pp put the ranks on a grid (runtime/parallel): tensor-parallel layers over tp,
// pipeline chunks over pp (--schedule gpipe|1f1b|interleaved, --virtual-stages), ZeRO over the
// rest (dp = world / (tp x pp)); --sequence-parallel and --recompute as in Megatron.
// --partition params|measured cuts the pipeline into stages balanced by parameter count (the
// default) or by each segment's forward + backward time, measured at start-up by a one-layer
// probe (runtime/parallel/gpt/segment_cost_probe.h; dense models only).
// --report writes a JSON file with every step's loss and time, the digest of the fp32 master
// parameters, and each rank's peak bytes by tier and category. --trace writes each rank's
// Chrome/Perfetto trace (compute, gathers, reductions, optimizer tiles, offload I/O and copies).
// --eval-every N prints a held-out loss every N steps: --eval-batches K fixed batches of the
// corpus' validation split (CharCorpus::val_tokens, never sampled for training), forward only
// (ZeroEngine::BeginEvaluation; on a grid, one forward-only pipeline pass, GridGpt::Evaluate).
// --save-dir DIR --save-every N writes a checkpoint (runtime/checkpoint/checkpoint.h) every N
// steps and after the last; --resume DIR (a checkpoint or a --save-dir) continues from it.
// --steps is the total: a run resumed at step k trains steps k .. --steps - 1, the same steps,
// on the same data, as the run it continues (data-parallel runs only).
// The config means what it means in DeepSpeed (docs/CONFIG.md): its "auto" keys take this
// program's values (--micro-batch, --accumulation-steps, --lr, --warmup-steps, --grad-clip,
// --precision, --steps, --hidden, the world size), each printed; its batch sizes resolve as
// DeepSpeed resolves them at the data-parallel world size; steps_per_print paces the progress
// lines unless --print-every is given. Sizes that cannot fit this host's memory are refused
// before anything is allocated (CheckMemoryFits, from zero-plan's plan of the run).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstring>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <unistd.h>
#include <string>
#include <vector>

#include "examples/train_gpt/batch_sampler.h"
#include "examples/train_gpt/char_corpus.h"
#include "examples/train_gpt/memory_fit.h"
#include "examples/train_gpt/train_gpt_args.h"
#include "runtime/base/atomic_file.h"
#include "runtime/base/termination_signals.h"
#include "runtime/base/trace_recorder.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors_export.h"
#include "runtime/comm/backend_registry.h"
#include "runtime/comm/connect.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/engine/zero_engine.h"
#include "runtime/engine/zero_memory_model.h"
#include "runtime/nn/gpt.h"
#include "runtime/parallel/gpt/grid_gpt.h"
#include "runtime/plan/cluster_plan.h"
#include "runtime/topology/launch_info.h"

namespace zs {
namespace {


// What every rank contributes to the report (rank 0 writes it).
struct RankPeaks {
  std::vector<int64_t> values;  // MemorySnapshot peaks: tier x category, then tier totals, total
};

std::vector<int64_t> PackPeaks(const MemorySnapshot& m) {
  std::vector<int64_t> v;
  for (int t = 0; t < kNumMemoryTiers; ++t)
    for (int c = 0; c < kNumMemoryCategories; ++c) v.push_back(m.peak[t][c]);
  for (int t = 0; t < kNumMemoryTiers; ++t) v.push_back(m.tier_peak[t]);
  v.push_back(m.total_peak);
  return v;
}

nlohmann::json PeaksToJson(const std::vector<int64_t>& v) {
  nlohmann::json j;
  size_t k = 0;
  for (int t = 0; t < kNumMemoryTiers; ++t) {
    nlohmann::json tier;
    for (int c = 0; c < kNumMemoryCategories; ++c, ++k) {
      if (v[k] != 0) tier[std::string(MemoryCategoryName(MemoryCategory(c)))] = v[k];
    }
    j[std::string(MemoryTierName(MemoryTier(t)))] = tier;
  }
  for (int t = 0; t < kNumMemoryTiers; ++t, ++k) {
    j[std::string(MemoryTierName(MemoryTier(t)))]["total"] = v[k];
  }
  j["total"] = v[k];
  return j;
}

// All ranks' peaks, gathered over the engine's group (raw int64 bits as pairs of f32).
StatusOr<std::vector<std::vector<int64_t>>> GatherPeaks(Communicator& comm,
                                                        const MemorySnapshot& mine) {
  std::vector<int64_t> local = PackPeaks(mine);
  const size_t n = local.size();
  std::vector<int64_t> all(n * size_t(comm.size()));
  std::copy(local.begin(), local.end(), all.begin() + n * size_t(comm.rank()));
  ZS_RETURN_IF_ERROR(
      comm.AllGather(all.data() + n * size_t(comm.rank()), all.data(), 2 * n, DType::kF32));
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < comm.size(); ++r) {
    out.emplace_back(all.begin() + n * size_t(r), all.begin() + n * size_t(r + 1));
  }
  return out;
}

// The grid the flags ask for: --tp x --pp, and dp = the rest of the world.
StatusOr<RankGrid> GridOf(const Args& args, int world) {
  if (world % (args.tp * args.pp) != 0) {
    return InvalidArgumentError(
        fmt::format("--tp {} x --pp {} = {} does not divide the world size {}", args.tp, args.pp,
                    args.tp * args.pp, world));
  }
  return RankGrid::Create(args.tp, args.pp, world / (args.tp * args.pp), world);
}

// Every rank's string, in rank order (each padded to the longest; collective over `comm`).
StatusOr<std::vector<std::string>> GatherStrings(Communicator& comm, const std::string& mine) {
  const float len = float(mine.size());
  std::vector<float> lens(size_t(comm.size()));
  ZS_RETURN_IF_ERROR(comm.AllGather(&len, lens.data(), 1, DType::kF32));
  size_t width = 0;
  for (float l : lens) width = std::max(width, size_t(l));
  width = (width + 3) / 4 * 4;  // whole f32 elements
  std::vector<char> all(width * size_t(comm.size()), '\0');
  std::copy(mine.begin(), mine.end(), all.begin() + ptrdiff_t(width * size_t(comm.rank())));
  ZS_RETURN_IF_ERROR(comm.AllGather(all.data() + width * size_t(comm.rank()), all.data(),
                                    width / 4, DType::kF32));
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r) {
    out.emplace_back(all.data() + width * size_t(r), size_t(lens[size_t(r)]));
  }
  return out;
}

struct Shared {  // read-only after main() sets it up
  Args args;
  EngineConfig config;
  const CharCorpus* corpus = nullptr;
};

Status RunRank(const Shared& shared, Communicator& comm, MemoryTracker& tracker) {
  const Args& args = shared.args;
  const EngineConfig& config = shared.config;
  const int rank = comm.rank();
  const int world = comm.size();
  const bool lead = rank == 0;
  ZS_ASSIGN_OR_RETURN(auto device, CreateDevice(args.device, tracker));

  nn::GptConfig gpt_config;
  gpt_config.vocab = shared.corpus->vocab_size();
  gpt_config.max_seq = args.seq;
  gpt_config.layers = args.layers;
  gpt_config.hidden = args.hidden;
  gpt_config.heads = args.heads;
  gpt_config.layer_drop = args.layer_drop;  // [Note: LayerDrop]: drawn from the seed
  gpt_config.layer_drop_seed = args.seed;
  std::unique_ptr<TraceRecorder> trace;
  if (!args.trace.empty()) trace = std::make_unique<TraceRecorder>(rank);
  // Data parallel only: nn::Gpt over one engine. On a grid: GridGpt (tensor-parallel layers,
  // pipeline chunks, one engine per stage over its dp group).
  std::unique_ptr<nn::Gpt> gpt;
  std::unique_ptr<ZeroEngine> dp_engine;
  std::optional<ProcessGroups> groups;
  std::unique_ptr<parallel::GridGpt> grid;
  int dp_size = world, dp_rank = rank;
  if (args.grid()) {
    ZS_ASSIGN_OR_RETURN(RankGrid rank_grid, GridOf(args, world));
    ZS_ASSIGN_OR_RETURN(ProcessGroups g, ProcessGroups::Create(comm, rank_grid));
    groups.emplace(std::move(g));
    dp_size = rank_grid.dp_size();
    dp_rank = groups->coord().dp;
    parallel::GridGptOptions options;
    options.model.gpt = gpt_config;
    options.model.sequence_parallel = args.sequence_parallel;
    options.engine = config;
    options.micro_batch = config.train_micro_batch_size_per_gpu;
    options.seq = args.seq;
    options.seed = args.seed;
    ZS_ASSIGN_OR_RETURN(options.schedule, ParseScheduleKind(args.schedule));
    options.virtual_stages = args.virtual_stages;
    options.recompute = args.recompute;
    ZS_ASSIGN_OR_RETURN(options.partition, parallel::ParsePartitionCost(args.partition));
    options.model.moe.experts = args.experts;
    options.model.moe.top_k = args.top_k;
    options.model.moe.capacity_factor = args.capacity_factor;
    options.ep = args.ep;
    ZS_ASSIGN_OR_RETURN(grid,
                        parallel::GridGpt::Create(options, *groups, *device, &tracker, trace.get()));
  } else {
    ZS_ASSIGN_OR_RETURN(gpt, nn::Gpt::Create(gpt_config, &tracker));
    ZS_ASSIGN_OR_RETURN(dp_engine, ZeroEngine::Create(config, gpt->spec(), gpt->Init(args.seed),
                                                      *device, comm, trace.get()));
  }
  ZeroEngine* engine = grid != nullptr ? &grid->engine() : dp_engine.get();

  BatchSplit split;
  split.world_size = dp_size;
  split.micro_batch = int(config.train_micro_batch_size_per_gpu);
  split.accumulation_steps = int(config.gradient_accumulation_steps);
  ZS_ASSIGN_OR_RETURN(BatchSampler sampler,
                      BatchSampler::Create(shared.corpus->train_tokens(), args.seq, args.seed,
                                           split.global_batch()));
  const int64_t B = split.micro_batch, T = args.seq;
  // Checkpoints: the trainer object holds the data position (the next step: the sampler is a
  // function of the seed, the global batch and the step) and what the sampler's rng derives
  // from, so a resumed run sees the same batches.
  const nlohmann::json trainer_base{{"program", "train_gpt"},
                                    {"seed", args.seed},
                                    {"global_batch", split.global_batch()},
                                    {"seq", args.seq}};
  int start_step = 0;
  if (!args.resume.empty()) {
    // A grid loads a checkpoint of any grid (or of a data-parallel run) and vice versa
    // ([Note: grid checkpoints] in runtime/checkpoint/checkpoint.h).
    ZS_ASSIGN_OR_RETURN(CheckpointManifest m, grid != nullptr
                                                  ? grid->LoadCheckpoint(args.resume)
                                                  : LoadCheckpoint(*engine, comm, args.resume));
    for (const char* key : {"seed", "global_batch", "seq"}) {
      if (m.trainer.value(key, nlohmann::json()) != trainer_base[key]) {
        return InvalidArgumentError(fmt::format(
            "--resume {}: the checkpoint was trained with {} {}, this run has {}", m.dir, key,
            m.trainer.value(key, nlohmann::json()).dump(), trainer_base[key].dump()));
      }
    }
    start_step = m.trainer.value("data_position", nlohmann::json{{"next_step", m.step}})
                     .value("next_step", int(m.step));
    if (lead) {
      fmt::print("resumed from {} (step {}, saved at world {} stage {}{})\n", m.dir, m.step,
                 m.world_size, m.stage, m.grid.is_null() ? "" : ", grid " + m.grid.dump());
    }
  }
  auto save = [&](int next_step) -> Status {
    nlohmann::json trainer = trainer_base;
    trainer["data_position"] = {{"next_step", next_step}};
    ZS_ASSIGN_OR_RETURN(const std::string dir,
                        grid != nullptr ? grid->SaveCheckpoint(args.save_dir, trainer)
                                        : SaveCheckpoint(*engine, comm, args.save_dir, trainer));
    // stage3_gather_16bit_weights_on_model_save: SaveCheckpoint has also written the
    // consolidated 16-bit weights into the step directory (listed in its manifest).
    std::error_code ec;
    const bool wrote16 = std::filesystem::exists(std::filesystem::path(dir) /
                                                 kConsolidated16BitFile, ec);
    if (lead) {
      fmt::print("checkpoint {} written{}\n", dir,
                 wrote16 ? fmt::format(" (and {})", kConsolidated16BitFile) : "");
    }
    return OkStatus();
  };
  std::vector<int32_t> inputs(size_t(B * T)), targets(size_t(B * T));
  const double psi = double(grid != nullptr ? grid->model().full_numel() : gpt->spec().numel());
  if (grid != nullptr) {
    // Every rank's role, printed in rank order by rank 0.
    ZS_ASSIGN_OR_RETURN(std::vector<std::string> roles, GatherStrings(comm, grid->RoleString()));
    if (lead) {
      fmt::print("grid: {}; schedule {}{}{}{}{}\n", groups->grid().ToString(), args.schedule,
                 args.virtual_stages > 1 ? fmt::format(" x {} virtual stages", args.virtual_stages)
                                         : "",
                 args.sequence_parallel ? ", sequence parallel" : "",
                 args.recompute ? ", activation recompute" : "",
                 args.experts > 0
                     ? fmt::format(", {} experts per block (top-{}, capacity factor {}) over "
                                   "ep {}",
                                   args.experts, args.top_k, args.capacity_factor, args.ep)
                     : "");
      for (int r = 0; r < world; ++r) fmt::print("  rank {}: {}\n", r, roles[size_t(r)]);
      fmt::print("  pipeline stages {}\n", grid->PartitionString());
    }
  }
  if (lead) {
    fmt::print(
        "train_gpt: {} parameters ({} layers, hidden {}, heads {}, vocab {}, seq {}), "
        "ZeRO stage {}, {} ranks over '{}', compute {}, global batch {} x {} tokens\n",
        int64_t(psi), args.layers, args.hidden, args.heads, gpt_config.vocab, T, engine->stage(),
        world, comm.backend_name(), DTypeName(engine->compute_dtype()), split.global_batch(), T);
    fmt::print("optimizer: {}\n", engine->optimizer_summary());
    const OffloadReport o = engine->offload_report();
    if (o.optimizer_tier != "device" || o.parameter_tier != "device") {
      fmt::print("offload: optimizer states in {}{}, {} tiles; parameter shards in {}\n",
                 o.optimizer_tier,
                 o.nvme_file.empty() ? "" : fmt::format(" ({}, {})", o.nvme_file, o.io_backend),
                 o.tiles, o.parameter_tier);
    }
  }

  nlohmann::json steps_json = nlohmann::json::array();
  // Held-out loss ([Note: evaluation] in zero_engine.h): the same eval_batches batches of the
  // validation split every time, so the values compare across evaluations and splits.
  nlohmann::json eval_json = nlohmann::json::array();
  std::optional<BatchSampler> val_sampler;
  BatchSplit eval_split{split.world_size, split.micro_batch, 1};
  if (args.eval_every > 0) {
    auto created = BatchSampler::Create(shared.corpus->val_tokens(), args.seq, args.seed + 1,
                                        eval_split.global_batch());
    if (!created.ok()) {
      return created.status().WithContext(
          fmt::format("--eval-every: the validation split ({} tokens)",
                      shared.corpus->val_tokens().size()));
    }
    val_sampler.emplace(std::move(*created));
  }
  auto evaluate = [&](int step) -> Status {
    double mean = 0;
    if (grid != nullptr) {
      // One forward-only pass of the pipeline over the eval batches (GridGpt::Evaluate).
      ZS_ASSIGN_OR_RETURN(
          mean, grid->Evaluate(
                    [&](int k, std::span<int32_t> tokens, std::span<int32_t> targets_out) {
                      return val_sampler->FillMicroBatch(k, eval_split, dp_rank, 0, tokens,
                                                         targets_out);
                    },
                    args.eval_batches));
    } else {
      ZS_RETURN_IF_ERROR(engine->BeginEvaluation());
      double loss = 0;
      for (int k = 0; k < args.eval_batches; ++k) {
        ZS_RETURN_IF_ERROR(
            val_sampler->FillMicroBatch(k, eval_split, dp_rank, 0, inputs, targets));
        ZS_ASSIGN_OR_RETURN(float l, gpt->Forward(*engine, inputs, targets, B, T));
        loss += double(l) / args.eval_batches;
      }
      ZS_RETURN_IF_ERROR(engine->EndEvaluation());
      ZS_ASSIGN_OR_RETURN(mean, engine->AllReduceMean(loss));
    }
    eval_json.push_back({{"step", step}, {"loss", mean}});
    if (lead) {
      fmt::print("eval  {:5d}  held-out loss {:.4f}  ({} batches x {} sequences)\n", step, mean,
                 args.eval_batches, eval_split.global_batch());
      std::fflush(stdout);
    }
    return OkStatus();
  };
  StepTimes last_times;
  double last_compute_seconds = 0.0;  // the last step's forward and backward (rank 0)
  double step_seconds_total = 0.0, optimizer_seconds_total = 0.0;
  std::vector<double> losses, times;
  const double tokens_per_step = double(split.global_batch() * T);
  auto run_start = std::chrono::steady_clock::now();
  for (int step = start_step; step < args.steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    StepResult result;
    double mean_loss = 0;
    if (grid != nullptr) {
      ZS_ASSIGN_OR_RETURN(
          parallel::GridStepResult r,
          grid->TrainStep([&](int m, std::span<int32_t> tokens, std::span<int32_t> targets_out) {
            return sampler.FillMicroBatch(step, split, dp_rank, m, tokens, targets_out);
          }));
      result = r.step;
      mean_loss = r.loss;
    } else {
      double loss = 0;
      // A step of many micro-batches (gradient_accumulation_steps: 1e9 is a valid config) says
      // how far it is every 30 s, so a long step never looks like a hang.
      auto last_note = t0;
      for (int64_t m = 0; m < split.accumulation_steps; ++m) {
        ZS_RETURN_IF_ERROR(sampler.FillMicroBatch(step, split, rank, int(m), inputs, targets));
        ZS_ASSIGN_OR_RETURN(float l, gpt->ForwardBackward(*engine, inputs, targets, B, T,
                                                          nn::LayerDropKey{step, m, rank}));
        loss += double(l) / double(split.accumulation_steps);
        const auto now = std::chrono::steady_clock::now();
        if (lead && now - last_note > std::chrono::seconds(30)) {
          last_note = now;
          const double elapsed = std::chrono::duration<double>(now - t0).count();
          fmt::print("step {:5d}: micro-batch {} of {} (gradient_accumulation_steps) after "
                     "{:.0f} s; the step needs about {:.3g} s\n",
                     step, m + 1, split.accumulation_steps, elapsed,
                     elapsed / double(m + 1) * double(split.accumulation_steps));
          std::fflush(stdout);
        }
      }
      ZS_ASSIGN_OR_RETURN(result, engine->Step());
      ZS_ASSIGN_OR_RETURN(mean_loss, engine->AllReduceMean(loss));
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    losses.push_back(mean_loss);
    times.push_back(seconds);
    const StepTimes& t = result.times;
    steps_json.push_back({{"step", step},
                          {"loss", mean_loss},
                          {"seconds", seconds},
                          {"lr", result.lr},
                          {"grad_norm", result.grad_norm},
                          {"loss_scale", result.loss_scale},
                          {"skipped", result.skipped},
                          {"rank0_step_times",
                           {{"step_seconds", t.step_seconds},
                            {"forward_backward_seconds", seconds - t.step_seconds},
                            {"collective_seconds", t.collective_seconds},
                            {"optimizer_seconds", t.optimizer_seconds},
                            {"copy_wait_seconds", t.copy_wait_seconds},
                            {"nvme_read_wait_seconds", t.nvme_read_wait_seconds},
                            {"nvme_write_wait_seconds", t.nvme_write_wait_seconds},
                            {"device_to_host_bytes", t.device_to_host_bytes},
                            {"host_to_device_bytes", t.host_to_device_bytes},
                            {"nvme_read_bytes", t.nvme_read_bytes},
                            {"nvme_written_bytes", t.nvme_written_bytes}}}});
    last_times = t;
    last_compute_seconds = seconds - t.step_seconds;
    step_seconds_total += seconds;
    optimizer_seconds_total += t.optimizer_seconds;
    if (step % args.print_every == 0 || step + 1 == args.steps) {
      // Every rank takes part (the condition is the same everywhere); rank 0 prints.
      ZS_ASSIGN_OR_RETURN(auto peaks, GatherPeaks(comm, tracker.Snapshot()));
      if (lead) {
        std::string memory;
        for (int r = 0; r < world; ++r) {
          const int64_t device_peak =
              peaks[r][size_t(kNumMemoryTiers * kNumMemoryCategories + int(MemoryTier::kDevice))];
          memory += fmt::format("{}{}", r == 0 ? "" : " ", FormatBytes(device_peak));
        }
        fmt::print(
            "step {:5d}  loss {:.4f}  lr {:.2e}  grad norm {:.3f}{}  {:.0f} tokens/s  "
            "peak device memory per rank: {}\n",
            step, mean_loss, result.lr, result.grad_norm,
            result.skipped ? "  (overflow: skipped)" : "", tokens_per_step / seconds, memory);
        std::fflush(stdout);
      }
    }
    if (args.eval_every > 0 && (step + 1) % args.eval_every == 0) {
      ZS_RETURN_IF_ERROR(evaluate(step));
    }
    if (!args.save_dir.empty() &&
        ((args.save_every > 0 && (step + 1) % args.save_every == 0) || step + 1 == args.steps)) {
      ZS_RETURN_IF_ERROR(save(step + 1));
    }
  }
  const double total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  uint64_t digest = 0;
  if (grid != nullptr) {
    ZS_ASSIGN_OR_RETURN(digest, grid->MasterDigest());
  } else {
    ZS_ASSIGN_OR_RETURN(digest, engine->MasterDigest());
  }
  ZS_ASSIGN_OR_RETURN(auto peaks, GatherPeaks(comm, tracker.Snapshot()));
  if (trace != nullptr) {
    const std::string path = TracePathForRank(args.trace, rank);
    ZS_RETURN_IF_ERROR(trace->WriteJson(path));
    if (lead) {
      fmt::print("trace: {} spans per rank in {} (open in ui.perfetto.dev)\n", trace->size(),
                 TracePathForRank(args.trace, 0));
    }
  }
  const OffloadReport offload = engine->offload_report();
  if (!lead) return OkStatus();

  // Where the time and the bytes went (rank 0), and the peak of every memory tier.
  {
    const auto& v = peaks[0];
    std::string tiers;
    for (int t = 0; t < kNumMemoryTiers; ++t) {
      const int64_t peak = v[size_t(kNumMemoryTiers * kNumMemoryCategories + t)];
      if (peak > 0) {
        tiers += fmt::format("{}{} {}", tiers.empty() ? "" : ", ", MemoryTierName(MemoryTier(t)),
                             FormatBytes(peak));
      }
    }
    fmt::print("\npeak memory by tier (rank 0): {}\n", tiers);
    const OffloadReport& o = offload;
    fmt::print(
        "time (rank 0): {:.2f} s in steps, of which the optimizer kernels {:.2f} s; last step: "
        "forward+backward {:.3f} s, optimizer {:.3f} s, collectives {:.3f} s, waiting on copies "
        "{:.3f} s, NVMe reads {:.3f} s, NVMe writes {:.3f} s\n",
        step_seconds_total, optimizer_seconds_total, last_compute_seconds,
        last_times.optimizer_seconds, last_times.collective_seconds, last_times.copy_wait_seconds,
        last_times.nvme_read_wait_seconds, last_times.nvme_write_wait_seconds);
    if (o.optimizer_tier != "device") {
      fmt::print(
          "offload moved (rank 0): device->host {}, host->device {}, NVMe read {}, NVMe written "
          "{} ({} tile reads waited for from the start, {} prefetched)\n",
          FormatBytes(o.device_to_host_bytes), FormatBytes(o.host_to_device_bytes),
          FormatBytes(o.nvme_read_bytes), FormatBytes(o.nvme_written_bytes), o.nvme_demand_reads,
          o.nvme_prefetch_hits);
    }
    if (!o.param_nvme_file.empty()) {
      fmt::print(
          "parameter shards on NVMe (rank 0): read {} ({} reads prefetched, {:.3f} s waited), "
          "written {}\n",
          FormatBytes(o.param_nvme_read_bytes), o.param_nvme_prefetch_hits,
          o.param_nvme_read_wait_seconds, FormatBytes(o.param_nvme_written_bytes));
    }
  }

  // The measured states beside what the ZeRO formulas give for every stage.
  const double c = double(DTypeSize(engine->compute_dtype()));
  const double optimizer_bytes = engine->optimizer_bytes_per_param();
  const int tp = groups ? groups->grid().tp_size() : 1, pp = groups ? groups->grid().pp_size() : 1;
  fmt::print(
      "\nper-rank model states (parameters + gradients + optimizer states), {} ranks{}:\n", world,
      groups ? fmt::format(" (formula: psi / (tp x pp) = {} parameters per model-parallel rank, "
                           "sharded over dp = {})",
                           int64_t(psi / (tp * pp)), dp_size) +
                   (args.experts > 0 ? fmt::format("; the experts' states are sharded over "
                                                   "dp / ep = {} instead, not in the formula",
                                                   dp_size / args.ep)
                                     : "")
             : "");
  for (int s = 0; s <= 3; ++s) {
    const ZeroStateBytes f = ZeroGridFormulaBytes(s, psi, tp, pp, dp_size, c, optimizer_bytes);
    fmt::print("  stage {}: formula {:>10}", s, FormatBytes(int64_t(f.total())));
    if (s == engine->stage()) {
      for (int r = 0; r < world; ++r) {
        const auto& v = peaks[r];
        auto cell = [&](MemoryCategory cat) {
          return v[size_t(int(MemoryTier::kDevice) * kNumMemoryCategories + int(cat))];
        };
        const int64_t measured = cell(MemoryCategory::kParameters) +
                                 cell(MemoryCategory::kGradients) +
                                 cell(MemoryCategory::kOptimizerStates);
        fmt::print("{}rank {} measured {}", r == 0 ? "   <- this run: " : ", ", r,
                   FormatBytes(measured));
      }
    }
    fmt::print("\n");
  }
  const GatherReport g = engine->gather_report();
  if (engine->stage() == 3) {
    fmt::print(
        "stage 3 gathers (rank 0): {} all-gathers, {} prefetch hits, {} on demand, {} "
        "reuse hits, {} trace invalidations, peak {} gathered elements\n",
        g.gathers, g.prefetch_hits, g.demand_gathers, g.reuse_hits, g.trace_invalidations,
        g.peak_live_elements);
    if (g.max_live_exceeded > 0) {  // a soft cap (runtime/gather/gather_coordinator.h)
      fmt::print(
          "stage 3 gathers (rank 0): {} gathers held more than stage3_max_live_parameters {} "
          "(peak {} gathered elements): a unit in use is larger than the cap\n",
          g.max_live_exceeded, config.zero_optimization.stage3_max_live_parameters,
          g.peak_live_elements);
    }
  }
  if (losses.empty()) losses.push_back(std::nan(""));  // resumed at --steps: nothing to train
  fmt::print("loss {:.4f} -> {:.4f} in {} steps, {:.1f} s; master digest {:016x}\n", losses.front(),
             losses.back(), args.steps - start_step, total_seconds, digest);

  if (!args.report.empty()) {
    nlohmann::json report;
    report["model"] = {{"vocab", gpt_config.vocab}, {"seq", T},
                       {"layers", args.layers},     {"hidden", args.hidden},
                       {"heads", args.heads},       {"parameters", int64_t(psi)}};
    report["world_size"] = world;
    report["grid"] = {{"tp", tp}, {"pp", pp}, {"dp", dp_size}, {"schedule", args.schedule},
                      {"virtual_stages", args.virtual_stages},
                      {"sequence_parallel", args.sequence_parallel},
                      {"recompute", args.recompute},
                      {"experts", args.experts},
                      {"ep", args.ep}};
    report["backend"] = std::string(comm.backend_name());
    report["seed"] = args.seed;
    report["config"] = nlohmann::json::parse(EngineConfigToJson(config));
    report["losses"] = losses;
    report["step_seconds"] = times;
    report["steps"] = steps_json;
    report["eval"] = eval_json;
    report["tokens_per_second"] = tokens_per_step * args.steps / total_seconds;
    report["master_digest"] = fmt::format("{:016x}", digest);
    nlohmann::json mem = nlohmann::json::array();
    for (int r = 0; r < world; ++r) mem.push_back(PeaksToJson(peaks[r]));
    report["peak_bytes_per_rank"] = mem;
    nlohmann::json formulas;
    for (int s = 0; s <= 3; ++s) {
      formulas[fmt::format("stage{}", s)] =
          ZeroGridFormulaBytes(s, psi, tp, pp, dp_size, c, optimizer_bytes).total();
    }
    report["formula_bytes_per_rank"] = formulas;
    report["gather"] = {{"gathers", g.gathers},
                        {"prefetch_hits", g.prefetch_hits},
                        {"demand_gathers", g.demand_gathers},
                        {"reuse_hits", g.reuse_hits},
                        {"trace_invalidations", g.trace_invalidations},
                        {"peak_live_elements", g.peak_live_elements},
                        {"eval_passes", g.eval_passes},
                        {"eval_gathers", g.eval_gathers},
                        {"eval_prefetch_hits", g.eval_prefetch_hits}};
    report["offload"] = {{"optimizer_tier", offload.optimizer_tier},
                         {"parameter_tier", offload.parameter_tier},
                         {"io_backend", offload.io_backend},
                         {"tiles", offload.tiles},
                         {"device_to_host_bytes", offload.device_to_host_bytes},
                         {"host_to_device_bytes", offload.host_to_device_bytes},
                         {"nvme_read_bytes", offload.nvme_read_bytes},
                         {"nvme_written_bytes", offload.nvme_written_bytes},
                         {"nvme_demand_reads", offload.nvme_demand_reads},
                         {"nvme_prefetch_hits", offload.nvme_prefetch_hits},
                         {"copy_wait_seconds", offload.copy_wait_seconds},
                         {"nvme_read_wait_seconds", offload.nvme_read_wait_seconds},
                         {"nvme_write_wait_seconds", offload.nvme_write_wait_seconds},
                         {"param_nvme_read_bytes", offload.param_nvme_read_bytes},
                         {"param_nvme_written_bytes", offload.param_nvme_written_bytes},
                         {"param_nvme_prefetch_hits", offload.param_nvme_prefetch_hits}};
    // [Note: atomic write] (runtime/base/atomic_file.h): a full disk leaves the old report or
    // none, never a truncated one, and the error names the errno.
    ZS_RETURN_IF_ERROR(WriteFileAtomically(args.report, report.dump(2) + "\n")
                           .WithContext(fmt::format("--report {}", args.report)));
    fmt::print("report written to {}\n", args.report);
  }
  return OkStatus();
}

}  // namespace
}  // namespace zs

int main(int argc, char** argv) {
  using namespace zs;
  TakeBackTerminationSignals("train_gpt");  // [Note: termination signals]
  Shared shared;
  Args& args = shared.args;
  CLI::App app{"train_gpt: a character-level GPT trained with the ZeRO engine"};
  AddTrainGptFlags(app, args);
  if (const CommandLineOutcome parsed = ParseTrainGptArgs(app, argc, argv); parsed.stop()) {
    if (!parsed.status.ok()) {
      fmt::print(stderr, "{}\nRun with --help for more information.\n", parsed.status.message());
    } else {
      fmt::print("{}", parsed.help);
    }
    return parsed.exit_code;
  }

  RegisterBuiltinBackends();
  auto launch = DetectLaunch();
  if (!launch.ok()) {
    fmt::print(stderr, "train_gpt: {}\n", launch.status().ToString());
    return 1;
  }
  // The report's directory (rank 0 writes it), checked before the training whose result it
  // holds.
  if (!args.report.empty() && launch->rank == 0) {
    if (Status writable = CheckWritableDirectory(args.report); !writable.ok()) {
      fmt::print(stderr, "train_gpt: --report: {}\n", writable.ToString());
      return 2;
    }
  }
  const int world_size = launch->world_size > 1 ? launch->world_size : args.world;
  if (world_size % (args.tp * args.pp) != 0) {
    fmt::print(stderr, "train_gpt: --tp {} x --pp {} = {} does not divide the world size {}\n",
               args.tp, args.pp, args.tp * args.pp, world_size);
    return 2;
  }
  const int dp_size = world_size / (args.tp * args.pp);
  if (!args.config_path.empty()) {
    ProgramValues program;
    program.micro_batch = args.micro_batch > 0 ? args.micro_batch : 1;
    program.accumulation_steps = args.accumulation_steps;
    program.dp_world_size = dp_size;
    program.max_grad_norm = args.grad_clip;
    program.lr = args.lr;
    program.betas = {{0.9, 0.999}};
    program.eps = 1e-8;
    program.weight_decay = 0.0;
    program.warmup_steps = args.warmup_steps;
    program.total_steps = args.steps;
    program.hidden_size = args.hidden;
    program.precision = args.precision;
    program.flags = {{"micro_batch", "--micro-batch"},   {"accumulation_steps", "--accumulation-steps"},
                     {"dp_world_size", "--world"},        {"max_grad_norm", "--grad-clip"},
                     {"lr", "--lr"},                      {"warmup_steps", "--warmup-steps"},
                     {"total_steps", "--steps"},          {"hidden_size", "--hidden"},
                     {"precision", "--precision"}};
    std::vector<AutoFill> filled;
    auto config = LoadEngineConfig(args.config_path, program, &filled);
    if (!config.ok()) {
      fmt::print(stderr, "train_gpt: {}\n", config.status().ToString());
      return 2;
    }
    shared.config = *config;
    if (launch->rank == 0) {
      for (const AutoFill& f : filled) {
        fmt::print("config {}: \"auto\" {} = {} (from {})\n", args.config_path, f.key, f.value,
                   f.from);
      }
    }
  }
  // The program's micro-batch: --micro-batch, or, when the config gives neither
  // train_batch_size nor train_micro_batch_size_per_gpu, train_gpt's default of 1 (as a
  // Hugging Face trainer supplies its per-device batch size).
  if (args.micro_batch > 0) {
    shared.config.train_micro_batch_size_per_gpu = args.micro_batch;
    shared.config.batch_keys_given.micro_batch = true;
  } else if (shared.config.train_batch_size == 0 && !shared.config.batch_keys_given.micro_batch) {
    shared.config.train_micro_batch_size_per_gpu = 1;
    shared.config.batch_keys_given.micro_batch = true;
  }
  // [Note: batch sizes as DeepSpeed] at the data-parallel world size.
  if (Status batch = shared.config.ResolveBatchSizes(
          dp_size, args.config_path.empty() ? std::string("(defaults)") : args.config_path);
      !batch.ok()) {
    fmt::print(stderr, "train_gpt: {}\n", batch.ToString());
    return 2;
  }
  if (app.count("--print-every") == 0) {
    shared.args.print_every = int(std::min<int64_t>(shared.config.steps_per_print, 1 << 30));
  }
  if (args.stage >= 0) shared.config.zero_optimization.stage = args.stage;
  if (args.layer_drop > 0) {
    // [Note: LayerDrop]: ranks skip different blocks, which the engine must allow.
    if (args.grid()) {
      fmt::print(stderr, "train_gpt: --layer-drop {} is for data-parallel runs; the grid flags "
                         "(--tp, --pp, --experts, ...) do not take it\n", args.layer_drop);
      return 2;
    }
    shared.config.zerostack.allow_unused_units = true;
  }
  if (!args.nvme_path.empty()) {
    shared.config.zero_optimization.offload_optimizer.nvme_path = args.nvme_path;
    shared.config.zero_optimization.offload_param.nvme_path = args.nvme_path;
  }
  if (Status valid = shared.config.Validate(); !valid.ok()) {
    fmt::print(stderr, "train_gpt: {}\n", valid.ToString());
    return 2;
  }

  auto corpus = args.corpus.empty() ? CharCorpus::Load(DefaultTrainGptCorpusPath())
                                    : CharCorpus::Load(args.corpus);
  if (!corpus.ok()) {
    fmt::print(stderr, "train_gpt: {}\n", corpus.status().ToString());
    return 2;
  }
  shared.corpus = &*corpus;
  if (Status fits = CheckMemoryFits(args, shared.config, shared.corpus->vocab_size(), *launch,
                                    dp_size);
      !fits.ok()) {
    fmt::print(stderr, "train_gpt: {}\n", fits.ToString());
    return 2;
  }

  Status status;
  if (launch->world_size > 1) {
    MemoryTracker tracker(launch->rank);
    CommOptions options;
    options.tracker = &tracker;
    options.timeout = std::chrono::milliseconds(shared.config.zerostack.comm_timeout_ms);
    auto world = ConnectFromEnvironment("fabric", options);
    status = world.ok() ? RunRank(shared, **world, tracker) : world.status();
  } else {
    CommOptions options;
    options.timeout = std::chrono::milliseconds(shared.config.zerostack.comm_timeout_ms);
    status =
        RunLocalRanks(args.world, options, [&](int, Communicator& comm, MemoryTracker& tracker) {
          return RunRank(shared, comm, tracker);
        });
  }
  if (!status.ok()) {
    fmt::print(stderr, "train_gpt: {}\n", status.ToString());
    return 1;
  }
  return 0;
}
