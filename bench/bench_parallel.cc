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
// BM_Bubble/schedule: two pipeline ranks (one per core of this 2-core machine, so compute does
// not contend), kMicroBatches micro-batches, the measured bubble fraction of the step
// (pipeline_runner.h, MeasuredBubbleFraction: time the ranks spent outside Forward/Backward)
// against the formula (p-1)/(m+p-1) (GPipe, 1F1B) or ((p-1)/v)/(m+(p-1)/v) (interleaved, v=2)
// and against `bubble_simulated`, the simulator's bubble for the measured per-chunk times (the
// formula assumes equal stages; the difference between the two is the stages' imbalance),
// and each schedule's peak activation bytes on the first stage (which holds the most in
// flight), with `activations_vs_gpipe` against GPipe measured in the same iteration, and
// `held_vs_gpipe`, the same for what the micro-batches in flight hold (without the chunk's fixed
// scratch), against `held_goal` = 1/m + one micro-batch (1/m).
//
//   build/bin/bench_parallel --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "runtime/base/splitmix64.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/parallel/gpt/grid_gpt.h"
#include "runtime/parallel/pipeline/schedule_simulator.h"

namespace zs::parallel {
namespace {

constexpr int kWarmup = 1;
constexpr int kTimed = 4;
constexpr int kMicroBatches = 8;
constexpr int kGlobalBatch = 64;  // sequences per step
const nn::GptConfig kModel{/*vocab=*/96, /*max_seq=*/64, /*layers=*/6, /*hidden=*/128,
                           /*heads=*/4};

struct GridRun {
  int tp = 1, pp = 1, dp = 1;
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  int virtual_stages = 1;
};

struct Measured {
  std::vector<double> step_seconds;       // rank 0, timed steps (barrier to barrier)
  std::vector<double> bubble;             // per timed step, over the pp ranks of dp group 0
  // The simulator's bubble for the same schedule with each chunk's measured mean forward and
  // backward times: what the schedule gives these (unequal) stages with free communication.
  std::vector<double> simulated_bubble;
  std::vector<MemorySnapshot> memory;     // per rank
  std::vector<int64_t> activation_peaks;  // per rank: the pipeline chunks' own peak
  std::vector<int64_t> micro_batch_peaks;  // per rank: the same without fixed scratch
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

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
        ZS_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(g.tp, g.pp, g.dp, world));
        ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(comm, grid));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        GridGptOptions o;
        o.model.gpt = kModel;
        o.engine.zero_optimization.stage = 1;
        o.engine.gradient_accumulation_steps = kMicroBatches;
        o.micro_batch = micro_batch;
        o.seq = kModel.max_seq;
        o.seed = 1;
        o.schedule = g.schedule;
        o.virtual_stages = g.virtual_stages;
        ZS_ASSIGN_OR_RETURN(auto model, GridGpt::Create(o, groups, *device, &tracker));
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
                  tokens[i] = int32_t(SplitMix64(key) % uint64_t(kModel.vocab));
                  targets[i] = int32_t(SplitMix64(~key) % uint64_t(kModel.vocab));
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
  if (!status.ok()) return status;
  ZS_ASSIGN_OR_RETURN(PipelineSchedule schedule,
                      BuildSchedule(g.schedule, g.pp, kMicroBatches, g.virtual_stages));
  for (const auto& ranks : steps) {
    out.bubble.push_back(MeasuredBubbleFraction(ranks));
    ChunkCosts costs = ChunkCosts::Uniform(schedule.num_chunks(), 0, 0);
    std::vector<int> forwards(size_t(schedule.num_chunks())), backwards(forwards);
    for (const PipelineStepResult& r : ranks) {
      for (const InstructionTiming& t : r.timings) {
        const size_t c = size_t(t.instruction.chunk);
        const bool fwd = t.instruction.op == PipelineOp::kForward;
        (fwd ? costs.forward : costs.backward)[c] += t.end_s - t.start_s;
        ++(fwd ? forwards : backwards)[c];
      }
    }
    for (size_t c = 0; c < forwards.size(); ++c) {
      if (forwards[c] > 0) costs.forward[c] /= forwards[c];
      if (backwards[c] > 0) costs.backward[c] /= backwards[c];
    }
    ZS_ASSIGN_OR_RETURN(ScheduleSimulation sim, SimulateSchedule(schedule, costs));
    out.simulated_bubble.push_back(sim.bubble_fraction);
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

void BM_Bubble(benchmark::State& state) {
  const auto kind = ScheduleKind(state.range(0));
  const int p = 2, v = kind == ScheduleKind::kInterleaved ? 2 : 1, m = kMicroBatches;
  const GridRun g{1, p, 1, kind, v};
  const GridRun gpipe{1, p, 1, ScheduleKind::kGPipe, 1};
  std::vector<double> bubbles, simulated, ratios, held_ratios;
  int64_t activations = 0;
  for (auto _ : state) {
    Measured base, mine;
    if (Status s = Run(gpipe, base); !s.ok()) return state.SkipWithError(s.ToString().c_str());
    if (Status s = Run(g, mine); !s.ok()) return state.SkipWithError(s.ToString().c_str());
    state.SetIterationTime(Median(mine.step_seconds));
    bubbles.push_back(Median(mine.bubble));
    simulated.push_back(Median(mine.simulated_bubble));
    activations = mine.activation_peaks[0];  // pp rank 0 holds the most in flight
    ratios.push_back(double(mine.activation_peaks[0]) / double(base.activation_peaks[0]));
    held_ratios.push_back(double(mine.micro_batch_peaks[0]) / double(base.micro_batch_peaks[0]));
  }
  const double formula = kind == ScheduleKind::kInterleaved
                             ? (double(p - 1) / v) / (m + double(p - 1) / v)
                             : double(p - 1) / (m + p - 1);
  state.counters["bubble"] = Median(bubbles);
  state.counters["bubble_formula"] = formula;
  state.counters["bubble_vs_formula"] = Median(bubbles) / formula;
  state.counters["bubble_simulated"] = Median(simulated);
  state.counters["stage0_activation_bytes"] = double(activations);
  state.counters["activations_vs_gpipe"] = Median(ratios);
  // What the micro-batches in flight hold, without the chunk's fixed scratch: GPipe keeps m,
  // 1F1B at most p on the first stage (the goal: at most 1/m of GPipe's plus one micro-batch).
  state.counters["held_vs_gpipe"] = Median(held_ratios);
  state.counters["held_goal"] = 1.0 / m + 1.0 / m;
  state.SetLabel(fmt::format("{}, p={} m={} v={}", ScheduleKindName(kind), p, m, v));
}
BENCHMARK(BM_Bubble)
    ->Arg(int(ScheduleKind::kGPipe))
    ->Arg(int(ScheduleKind::kOneFOneB))
    ->Arg(int(ScheduleKind::kInterleaved))
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace zs::parallel

BENCHMARK_MAIN();
