// bench_parallel: the GPT on a tp x pp x dp grid (runtime/parallel/gpt/grid_gpt.h), ranks as
// threads (local backend).
//
// BM_Grid/tp/pp/dp: step time and per-rank peak memory at a fixed global batch of kGlobalBatch
// sequences (kMicroBatches micro-batches per step; the micro-batch is what the dp size leaves).
// Every iteration also runs DP8 (tp = pp = 1, dp = 8) on the same model and global batch, in
// the same process, and `vs_dp8` is this grid's median step time over DP8's. Counters: the
// largest per-rank peak of model states (parameters + gradients + optimizer states), of
// activations, and of all memory.
//
// BM_Bubble/schedule/partition/model: two pipeline ranks (one per core of this 2-core machine, so
// compute does not contend), kMicroBatches micro-batches of kBubbleModel (more layers than
// BM_Grid's model, so that a contiguous partition has units fine enough to balance the stages,
// and a vocabulary large enough that the embedding and the head weigh what they do in a real
// GPT), the stages cut by parameter count (partition 0) or by measured forward + backward time
// (partition 1, GridGptOptions::partition, segment_cost_probe.h). Counters: the measured bubble
// fraction of the step (pipeline_runner.h, MeasuredBubbleFraction: time the ranks spent outside
// Forward/Backward) against the formula (p-1)/(m+p-1) (GPipe, 1F1B) or ((p-1)/v)/(m+(p-1)/v)
// (interleaved, v=2) and against `bubble_simulated`, the simulator's bubble for the measured
// per-chunk times (the formula assumes equal stages; the difference between the two is the
// stages' imbalance) and `bubble_replayed`, the simulator's for each instruction's own measured
// duration ([Note: replayed bubble]); `busy_max_vs_mean`, the busiest pp rank's compute time
// over the ranks' mean (1 = balanced stages), `fwd_max_vs_mean` and `bwd_max_vs_mean` the same
// for the forwards and the backwards alone (GPipe runs all forwards, then all backwards, so each
// phase is paced by its own slowest stage); `embed_vs_block` and `head_vs_block`, the costs the
// partition weighed (parameters or seconds) over a block's; each schedule's peak activation bytes on the
// first stage (which holds the most in flight), with `activations_vs_gpipe` against GPipe on
// the same stages (run once: byte counts do not depend on timing), and `held_vs_gpipe`, the same
// for what the micro-batches in flight hold (without the chunk's fixed scratch), against
// `held_goal` = 1/m + one micro-batch (1/m). The label names the partition and the stages'
// segment ranges (embed = 0, head = last; several when the measured partition varied).
// Model 0 is kBubbleModel (GPT-2-like proportions), model 1 the same GPT with 15 layers and a
// vocabulary fitted so that its stages can be equal ([Note: a balanceable bubble model]): the
// formula's premise, so there the bubble measures the schedule alone. `bind` 1 binds each
// rank's thread to its own CPU (and the pp links' workers with it), as zerorun binds rank
// processes; 0 leaves them to the scheduler.
//
// What partitioning by measured cost should move (written before measuring it): by parameter
// count, the embedding (wte: vocab x hidden, more than a block here) counts as more than a
// block but costs almost no compute, and the head (ln_f only: wte is tied) counts as nothing
// but runs the vocabulary matmul and the cross-entropy, about a block's compute or more. So the
// parameter-count partition gives the first stage fewer blocks and the last stage the head on
// top: the last stage is the slower, `busy_max_vs_mean` well above 1 and the bubble of GPipe
// and 1F1B well above the formula (the simulator agreeing). Measured costs move blocks from the
// last stage to the first until the stages differ by less than one block: `busy_max_vs_mean`
// should fall to within about half a block of 1, `bubble_simulated` toward the formula, and the
// measured bubble with it, the rest being communication and overhead (the measured bubble above
// the simulated one). Interleaved (v = 2) chunks are smaller, so both partitions do better there.
//
// [Note: replayed bubble] The formula assumes that every micro-batch of a chunk costs the same.
// On a shared VM the same instruction's time varies from micro-batch to micro-batch and from
// step to step (measured on a 2-vCPU AMD EPYC VM: a 4-block chunk's backward 17-25 ms within one
// step, and stretches of 100-250 ms in which one core ran 25-60% slower), and a pipeline waits
// for whichever instruction is late. `bubble_replayed` runs the simulator with each
// instruction's own measured duration and free communication: the bubble the schedule gives
// the compute as it ran. So the measured bubble splits into: the formula; the stages'
// imbalance (bubble_simulated - formula); the instructions' variation (bubble_replayed -
// bubble_simulated); and the runtime's own idle time (bubble - bubble_replayed: hand-offs,
// waits the schedule did not need), the only part the pipeline's code controls.
//
//   build/bin/bench_parallel --benchmark_filter=BM_Bubble --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <mutex>

#include "runtime/base/cpu_affinity.h"
#include "runtime/base/median.h"
#include "runtime/base/splitmix64.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/parallel/gpt/grid_gpt.h"
#include "runtime/parallel/gpt/segment_cost_probe.h"
#include "runtime/parallel/pipeline/schedule_simulator.h"

namespace zs::parallel {
namespace {

constexpr int kWarmup = 1;
constexpr int kTimed = 4;
constexpr int kMicroBatches = 8;
constexpr int kGlobalBatch = 64;  // sequences per step
const nn::GptConfig kModel{/*vocab=*/96, /*max_seq=*/64, /*layers=*/6, /*hidden=*/128,
                           /*heads=*/4};
// BM_Bubble's: 16 layers over 2 stages; the vocabulary holds wte = 2048 x 128 parameters (1.3
// blocks' worth) and makes the head's matmul about a block's compute, as in GPT-2 (where both
// are about 5 blocks' worth).
const nn::GptConfig kBubbleModel{/*vocab=*/2048, /*max_seq=*/32, /*layers=*/16, /*hidden=*/128,
                                 /*heads=*/4};

// The segment-cost probe on two ranks (one per core), as GridGpt's measured partition runs it.
StatusOr<SegmentKindCosts> ProbeOnTwoRanks(const nn::GptConfig& base, int64_t vocab) {
  SegmentKindCosts costs;
  // Two ranks, as the partition's own probe runs (GridGpt, PartitionCost::kMeasured): the
  // head's matmul and a block's attention slow down differently when both cores compute.
  Status s = RunLocalRanks(2, CommOptions{},
                           [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
    ZS_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(1, 2, 1, 2));
    ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(comm, grid));
    ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
    SegmentCostProbeOptions o;
    o.model.gpt = base;
    o.model.gpt.vocab = vocab;
    o.micro_batch = kGlobalBatch / kMicroBatches;
    o.seq = base.max_seq;
    o.warmup = 2;
    o.repeats = 9;
    ZS_ASSIGN_OR_RETURN(SegmentKindCosts c, MeasureSegmentCosts(o, groups, *device, &tracker));
    if (rank == 0) costs = c;  // every rank gets the same costs
    return OkStatus();
  });
  if (!s.ok()) return s;
  return costs;
}

// [Note: a balanceable bubble model] The bubble formula assumes equal stages. With cuts only
// between segments (embedding, blocks, head), kBubbleModel's stages cannot be equal on two
// ranks: its head costs about 1.2 blocks on the CPUs measured, so the best cut leaves the
// busier stage ~4% above the mean, which alone puts GPipe and 1F1B at 1.2-1.3x the formula
// (m = 8 micro-batches each pay the difference). BM_Bubble's model 1 measures the schedules
// on stages that CAN be equal: 15 layers and a vocabulary chosen on this CPU, before timing,
// so that the head costs one block (embedding + 8 blocks | 7 blocks + head, and for the
// interleaved v = 2 chunks embedding + 4 | 4 | 4 | 3 + head). The vocabulary comes from the
// segment-cost probe (segment_cost_probe.h, on two ranks as the partition measures) at two
// vocabularies, the head's cost being an offset plus a part proportional to the vocabulary;
// the result is rounded to a multiple of 64. The model stays a GPT trained the same way; only
// its head's width is fitted to the machine. The partition then measures the fitted model
// again and cuts it itself: nothing forces the cut.
StatusOr<nn::GptConfig> BalanceableBubbleModel(const nn::GptConfig& base) {
  const int64_t v1 = base.vocab, v0 = base.vocab / 4;
  ZS_ASSIGN_OR_RETURN(SegmentKindCosts c1, ProbeOnTwoRanks(base, v1));
  ZS_ASSIGN_OR_RETURN(SegmentKindCosts c0, ProbeOnTwoRanks(base, v0));
  // head(v) = offset + slope * v, in blocks (each probe's own block time).
  const double h1 = c1.head / c1.block, h0 = c0.head / c0.block;
  const double slope = (h1 - h0) / double(v1 - v0);
  if (!(slope > 0)) {
    return InternalError(fmt::format("the head's cost did not grow with the vocabulary: {:.3f} "
                                     "blocks at {}, {:.3f} at {}", h0, v0, h1, v1));
  }
  const double vocab = (1.0 - (h0 - slope * double(v0))) / slope;
  nn::GptConfig model = base;
  model.layers = 15;
  model.vocab = std::max<int64_t>(64, int64_t(std::llround(vocab / 64.0)) * 64);
  return model;
}

// Computed once per process, on first use (BM_Bubble's model 1).
const StatusOr<nn::GptConfig>& BalancedBubbleModel() {
  static const StatusOr<nn::GptConfig> model = BalanceableBubbleModel(kBubbleModel);
  return model;
}

struct GridRun {
  int tp = 1, pp = 1, dp = 1;
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  int virtual_stages = 1;
  nn::GptConfig model = kModel;
  PartitionCost partition = PartitionCost::kParams;
  std::vector<double> segment_costs;  // kExplicit
  // Each rank's thread bound to one CPU, rank r to the r-th allowed one (modulo their count), as
  // zerorun binds rank processes ([Note: rank binding] in tools/zerorun/launcher.h).
  bool bind_ranks = false;
};

struct Measured {
  std::vector<double> step_seconds;       // rank 0, timed steps (barrier to barrier)
  std::vector<double> bubble;             // per timed step, over the pp ranks of dp group 0
  // The simulator's bubble for the same schedule with each chunk's measured mean forward and
  // backward times: what the schedule gives these (unequal) stages with free communication.
  std::vector<double> simulated_bubble;
  // The simulator's bubble with each instruction's own measured duration: the step replayed as
  // its compute ran, with free communication ([Note: replayed bubble]).
  std::vector<double> replayed_bubble;
  std::vector<MemorySnapshot> memory;     // per rank
  std::vector<int64_t> activation_peaks;  // per rank: the pipeline chunks' own peak
  std::vector<int64_t> micro_batch_peaks;  // per rank: the same without fixed scratch
  std::vector<double> busy_max_vs_mean;   // per timed step: the busiest pp rank over the mean
  std::vector<double> forward_max_vs_mean;   // the same for the forwards alone
  std::vector<double> backward_max_vs_mean;  // and for the backwards alone
  std::vector<double> segment_costs;      // what the partition was computed from
  std::string stages;                     // the chunks' segment ranges, "[0, 8) [8, 18)"
};

Status Run(const GridRun& g, Measured& out) {
  const int world = g.tp * g.pp * g.dp;
  const int micro_batch = kGlobalBatch / (g.dp * kMicroBatches);
  if (micro_batch < 1 || micro_batch * g.dp * kMicroBatches != kGlobalBatch) {
    return InvalidArgumentError(fmt::format("dp {} does not split the global batch {} into {} "
                                            "micro-batches", g.dp, kGlobalBatch, kMicroBatches));
  }
  std::mutex mu;
  // [timed step][pp rank] of dp group 0, tp rank 0.
  std::vector<std::vector<PipelineStepResult>> steps(kTimed, std::vector<PipelineStepResult>(g.pp));
  out.activation_peaks.assign(size_t(world), 0);
  out.micro_batch_peaks.assign(size_t(world), 0);
  CommOptions options;
  Status status = RunLocalRanks(
      world, options,
      [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        if (const std::vector<int> cpus = AllowedCpus(); g.bind_ranks && !cpus.empty()) {
          // Before the groups are split: their workers are created on this thread and inherit.
          ZS_RETURN_IF_ERROR(BindThisThreadToCpu(cpus[size_t(rank) % cpus.size()]));
        }
        ZS_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(g.tp, g.pp, g.dp, world));
        ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(comm, grid));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        GridGptOptions o;
        o.model.gpt = g.model;
        o.engine.zero_optimization.stage = 1;
        o.engine.gradient_accumulation_steps = kMicroBatches;
        o.micro_batch = micro_batch;
        o.seq = g.model.max_seq;
        o.seed = 1;
        o.schedule = g.schedule;
        o.virtual_stages = g.virtual_stages;
        o.partition = g.partition;
        o.segment_costs = g.segment_costs;
        ZS_ASSIGN_OR_RETURN(auto model, GridGpt::Create(o, groups, *device, &tracker));
        if (rank == 0) {
          out.segment_costs = model->segment_costs();
          out.stages.clear();
          for (const ChunkUnits& c : model->partition().chunks) {
            out.stages += fmt::format("{}[{}, {})", out.stages.empty() ? "" : " ", c.begin, c.end);
          }
        }
        const int dp_rank = groups.coord().dp;
        std::vector<double> times;
        for (int step = 0; step < kWarmup + kTimed; ++step) {
          ZS_RETURN_IF_ERROR(comm.Barrier());  // every rank starts the step together
          auto t0 = std::chrono::steady_clock::now();
          ZS_ASSIGN_OR_RETURN(
              GridStepResult r,
              model->TrainStep([&](int mb, std::span<int32_t> tokens, std::span<int32_t> targets) {
                for (size_t i = 0; i < tokens.size(); ++i) {
                  const uint64_t key = uint64_t(step) << 40 ^ uint64_t(dp_rank) << 32 ^
                                       uint64_t(mb) << 24 ^ i;
                  tokens[i] = int32_t(SplitMix64(key) % uint64_t(g.model.vocab));
                  targets[i] = int32_t(SplitMix64(~key) % uint64_t(g.model.vocab));
                }
                return OkStatus();
              }));
          ZS_RETURN_IF_ERROR(comm.Barrier());  // the step ends when the slowest rank is done
          if (step >= kWarmup) {
            times.push_back(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            if (groups.coord().dp == 0 && groups.coord().tp == 0) {
              std::lock_guard<std::mutex> lock(mu);
              steps[size_t(step - kWarmup)][size_t(groups.coord().pp)] = std::move(r.pipeline);
            }
          }
        }
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0) out.step_seconds = times;
        out.activation_peaks[size_t(rank)] = model->activation_peak_bytes();
        out.micro_batch_peaks[size_t(rank)] = model->micro_batch_peak_bytes();
        return OkStatus();
      },
      &out.memory);
  out.bubble.clear();
  out.simulated_bubble.clear();
  out.replayed_bubble.clear();
  out.busy_max_vs_mean.clear();
  out.forward_max_vs_mean.clear();
  out.backward_max_vs_mean.clear();
  if (!status.ok()) return status;
  ZS_ASSIGN_OR_RETURN(PipelineSchedule schedule,
                      BuildSchedule(g.schedule, g.pp, kMicroBatches, g.virtual_stages));
  for (const auto& ranks : steps) {
    out.bubble.push_back(MeasuredBubbleFraction(ranks));
    // Per rank: [0] all, [1] forwards, [2] backwards; the max over ranks against the mean.
    std::array<double, 3> max{}, sum{};
    for (const PipelineStepResult& r : ranks) {
      std::array<double, 3> busy{};
      for (const InstructionTiming& t : r.timings) {
        const double d = t.end_s - t.start_s;
        busy[0] += d;
        busy[t.instruction.op == PipelineOp::kForward ? 1 : 2] += d;
      }
      for (size_t k = 0; k < 3; ++k) {
        max[k] = std::max(max[k], busy[k]);
        sum[k] += busy[k];
      }
    }
    const double n = double(ranks.size());
    out.busy_max_vs_mean.push_back(max[0] * n / sum[0]);
    out.forward_max_vs_mean.push_back(max[1] * n / sum[1]);
    out.backward_max_vs_mean.push_back(max[2] * n / sum[2]);
    // Each instruction's measured duration, and each chunk's mean over its micro-batches.
    const int chunks = schedule.num_chunks();
    const size_t m = size_t(kMicroBatches);
    InstructionCosts each =
        InstructionCosts::FromChunks(ChunkCosts::Uniform(chunks, 0, 0), kMicroBatches);
    for (const PipelineStepResult& r : ranks) {
      for (const InstructionTiming& t : r.timings) {
        const size_t at = size_t(t.instruction.chunk) * m + size_t(t.instruction.micro_batch);
        const bool fwd = t.instruction.op == PipelineOp::kForward;
        (fwd ? each.forward : each.backward)[at] = t.end_s - t.start_s;
      }
    }
    ChunkCosts means = ChunkCosts::Uniform(chunks, 0, 0);
    for (size_t at = 0; at < each.forward.size(); ++at) {
      means.forward[at / m] += each.forward[at] / m;
      means.backward[at / m] += each.backward[at] / m;
    }
    ZS_ASSIGN_OR_RETURN(ScheduleSimulation sim, SimulateSchedule(schedule, means));
    out.simulated_bubble.push_back(sim.bubble_fraction);
    ZS_ASSIGN_OR_RETURN(ScheduleSimulation replay, SimulateSchedule(schedule, each));
    out.replayed_bubble.push_back(replay.bubble_fraction);
  }
  return status;
}

int64_t MaxOver(const std::vector<MemorySnapshot>& memory, auto&& f) {
  int64_t m = 0;
  for (const MemorySnapshot& s : memory) m = std::max(m, int64_t(f(s)));
  return m;
}

int64_t StatePeak(const MemorySnapshot& s) {
  int64_t total = 0;
  for (MemoryCategory c : {MemoryCategory::kParameters, MemoryCategory::kGradients,
                           MemoryCategory::kOptimizerStates}) {
    for (int t = 0; t < kNumMemoryTiers; ++t) total += s.peak[t][int(c)];
  }
  return total;
}

void BM_Grid(benchmark::State& state) {
  const GridRun g{int(state.range(0)), int(state.range(1)), int(state.range(2))};
  const GridRun dp8{1, 1, 8};
  std::vector<double> mine, base;
  Measured last;
  for (auto _ : state) {
    Measured b, m;
    if (Status s = Run(dp8, b); !s.ok()) return state.SkipWithError(s.ToString().c_str());
    if (Status s = Run(g, m); !s.ok()) return state.SkipWithError(s.ToString().c_str());
    const double t = Median(m.step_seconds);
    state.SetIterationTime(t);
    mine.push_back(t);
    base.push_back(Median(b.step_seconds));
    last = std::move(m);
  }
  state.counters["vs_dp8"] = Median(mine) / Median(base);
  state.counters["state_peak_bytes"] = double(MaxOver(last.memory, StatePeak));
  state.counters["activation_peak_bytes"] = double(MaxOver(last.memory, [](const MemorySnapshot& s) {
    int64_t a = 0;
    for (int t = 0; t < kNumMemoryTiers; ++t) a += s.peak[t][int(MemoryCategory::kActivations)];
    return a;
  }));
  state.counters["total_peak_bytes"] =
      double(MaxOver(last.memory, [](const MemorySnapshot& s) { return s.total_peak; }));
  if (g.pp > 1) state.counters["bubble"] = Median(last.bubble);
  state.SetLabel(fmt::format("tp{} x pp{} x dp{}", g.tp, g.pp, g.dp));
}
BENCHMARK(BM_Grid)
    ->Args({1, 1, 8})
    ->Args({2, 1, 4})
    ->Args({1, 2, 4})
    ->Args({2, 2, 2})
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// [Note: phase split] GPipe runs every forward, then every backward, so each phase is paced by
// its own slowest stage, and stages balanced on forward + backward are equal in both phases only
// if every segment splits its work between the phases alike. A block's forward is about a third
// of its forward + backward; the head's was about half: its forward ran the vocabulary matmul
// and the cross-entropy's passes over rows x vocabulary (max, exp and sum, normalize) with a
// scalar std::exp per element, its backward two matmuls and one pass. So the last stage (blocks +
// head) was heavier in the forward phase and lighter in the backward one, and GPipe's bubble
// stayed 1.3x the formula on stages whose totals were equal. The cross-entropies now run SIMD
// row kernels (runtime/nn/softmax_kernels.h); the rest of the head's forward excess is the
// logits matmul itself (a [rows x hidden] by [hidden x vocab] product writing rows x vocab,
// which OpenBLAS runs less efficiently than the backward's two). BM_SegmentPhases measures it.
//
// BM_SegmentPhases/model: how each segment kind of BM_Bubble's model (0: GPT-2-like, 1:
// balanceable) splits its work between forward and backward, by the segment-cost probe on two
// ranks ([Note: phase split]). Counters: each kind's forward and backward over a block's, and
// `*_forward_share`, its forward over its forward + backward.
void BM_SegmentPhases(benchmark::State& state) {
  nn::GptConfig model = kBubbleModel;
  if (state.range(0) == 1) {
    const StatusOr<nn::GptConfig>& fitted = BalancedBubbleModel();
    if (!fitted.ok()) return state.SkipWithError(fitted.status().ToString().c_str());
    model = *fitted;
  }
  std::vector<SegmentKindCosts> runs;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    StatusOr<SegmentKindCosts> c = ProbeOnTwoRanks(model, model.vocab);
    if (!c.ok()) return state.SkipWithError(c.status().ToString().c_str());
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    runs.push_back(*c);
  }
  auto median = [&](auto&& f) {
    std::vector<double> v;
    for (const SegmentKindCosts& c : runs) v.push_back(f(c));
    return Median(std::move(v));
  };
  using C = const SegmentKindCosts&;
  state.counters["block_forward_share"] = median([](C c) { return c.block_forward / c.block; });
  state.counters["head_forward_share"] = median([](C c) { return c.head_forward / c.head; });
  state.counters["embed_forward_share"] = median([](C c) { return c.embed_forward / c.embed; });
  state.counters["head_vs_block"] = median([](C c) { return c.head / c.block; });
  state.counters["head_fwd_vs_block_fwd"] =
      median([](C c) { return c.head_forward / c.block_forward; });
  state.counters["head_bwd_vs_block_bwd"] = median(
      [](C c) { return (c.head - c.head_forward) / (c.block - c.block_forward); });
  state.counters["vocab"] = double(model.vocab);
  state.SetLabel(runs.back().ToString());
}
BENCHMARK(BM_SegmentPhases)
    ->ArgNames({"model"})
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

void BM_Bubble(benchmark::State& state) {
  const auto kind = ScheduleKind(state.range(0));
  const auto partition = PartitionCost(state.range(1));
  const bool balanceable = state.range(2) == 1;  // [Note: a balanceable bubble model]
  nn::GptConfig model = kBubbleModel;
  if (balanceable) {
    const StatusOr<nn::GptConfig>& fitted = BalancedBubbleModel();
    if (!fitted.ok()) return state.SkipWithError(fitted.status().ToString().c_str());
    model = *fitted;
  }
  const int p = 2, v = kind == ScheduleKind::kInterleaved ? 2 : 1, m = kMicroBatches;
  GridRun g{1, p, 1, kind, v, model, partition};
  g.bind_ranks = state.range(3) == 1;
  std::vector<double> bubbles, simulated, replayed, busy, forward, backward, embed_costs,
      head_costs;
  double ratio = 0, held_ratio = 0;
  int64_t activations = 0;
  std::string stages;  // every distinct partition of the iterations
  bool have_base = false;
  for (auto _ : state) {
    Measured mine;
    if (Status s = Run(g, mine); !s.ok()) return state.SkipWithError(s.ToString().c_str());
    state.SetIterationTime(Median(mine.step_seconds));
    bubbles.push_back(Median(mine.bubble));
    simulated.push_back(Median(mine.simulated_bubble));
    replayed.push_back(Median(mine.replayed_bubble));
    busy.push_back(Median(mine.busy_max_vs_mean));
    forward.push_back(Median(mine.forward_max_vs_mean));
    backward.push_back(Median(mine.backward_max_vs_mean));
    embed_costs.push_back(mine.segment_costs.front() / mine.segment_costs[1]);
    head_costs.push_back(mine.segment_costs.back() / mine.segment_costs[1]);
    if (stages.find(mine.stages) == std::string::npos) {
      stages += (stages.empty() ? "" : " / ") + mine.stages;
    }
    if (have_base) continue;
    // Activation bytes do not depend on timing: GPipe on the same stages (the costs this run's
    // partition was computed from) once, against the first iteration.
    have_base = true;
    Measured base = mine;
    if (kind != ScheduleKind::kGPipe) {
      const GridRun gpipe{1, p, 1, ScheduleKind::kGPipe, 1, model,
                          PartitionCost::kExplicit, mine.segment_costs};
      if (Status s = Run(gpipe, base); !s.ok()) return state.SkipWithError(s.ToString().c_str());
    }
    activations = mine.activation_peaks[0];  // pp rank 0 holds the most in flight
    ratio = double(mine.activation_peaks[0]) / double(base.activation_peaks[0]);
    held_ratio = double(mine.micro_batch_peaks[0]) / double(base.micro_batch_peaks[0]);
  }
  const double formula = kind == ScheduleKind::kInterleaved
                             ? (double(p - 1) / v) / (m + double(p - 1) / v)
                             : double(p - 1) / (m + p - 1);
  state.counters["bubble"] = Median(bubbles);
  state.counters["bubble_formula"] = formula;
  state.counters["bubble_vs_formula"] = Median(bubbles) / formula;
  state.counters["bubble_simulated"] = Median(simulated);
  state.counters["bubble_replayed"] = Median(replayed);
  state.counters["replayed_vs_formula"] = Median(replayed) / formula;
  state.counters["busy_max_vs_mean"] = Median(busy);
  state.counters["fwd_max_vs_mean"] = Median(forward);
  state.counters["bwd_max_vs_mean"] = Median(backward);
  // The costs the partition weighed, per block: parameters (partition 0) or seconds (1).
  state.counters["embed_vs_block"] = Median(embed_costs);
  state.counters["head_vs_block"] = Median(head_costs);
  state.counters["stage0_activation_bytes"] = double(activations);
  state.counters["activations_vs_gpipe"] = ratio;
  // What the micro-batches in flight hold, without the chunk's fixed scratch: GPipe keeps m,
  // 1F1B at most p on the first stage (the goal: at most 1/m of GPipe's plus one micro-batch).
  state.counters["held_vs_gpipe"] = held_ratio;
  state.counters["held_goal"] = 1.0 / m + 1.0 / m;
  state.counters["layers"] = double(model.layers);
  state.counters["vocab"] = double(model.vocab);
  state.SetLabel(fmt::format("{}, p={} m={} v={}, by {}, {}: {}", ScheduleKindName(kind), p, m,
                             v, PartitionCostName(partition),
                             balanceable ? "balanceable model" : "GPT-2-like model", stages));
}
BENCHMARK(BM_Bubble)
    ->ArgNames({"schedule", "partition", "model", "bind"})
    ->Args({int(ScheduleKind::kGPipe), int(PartitionCost::kParams), 0, 0})
    ->Args({int(ScheduleKind::kGPipe), int(PartitionCost::kMeasured), 0, 0})
    ->Args({int(ScheduleKind::kOneFOneB), int(PartitionCost::kParams), 0, 0})
    ->Args({int(ScheduleKind::kOneFOneB), int(PartitionCost::kMeasured), 0, 0})
    ->Args({int(ScheduleKind::kInterleaved), int(PartitionCost::kParams), 0, 0})
    ->Args({int(ScheduleKind::kInterleaved), int(PartitionCost::kMeasured), 0, 0})
    ->Args({int(ScheduleKind::kGPipe), int(PartitionCost::kMeasured), 1, 0})
    ->Args({int(ScheduleKind::kOneFOneB), int(PartitionCost::kMeasured), 1, 0})
    ->Args({int(ScheduleKind::kInterleaved), int(PartitionCost::kMeasured), 1, 0})
    ->Args({int(ScheduleKind::kGPipe), int(PartitionCost::kMeasured), 1, 1})
    ->Args({int(ScheduleKind::kOneFOneB), int(PartitionCost::kMeasured), 1, 1})
    ->Args({int(ScheduleKind::kInterleaved), int(PartitionCost::kMeasured), 1, 1})
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace zs::parallel

BENCHMARK_MAIN();
