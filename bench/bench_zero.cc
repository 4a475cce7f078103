// bench_zero: step time and per-rank memory of the ZeroEngine for each ZeRO stage on one fixed
// GPT, ranks as threads (local backend) at 1, 2 and 4 ranks.
//
// Each benchmark trains the same model from the same seed: 2 warm-up steps (the first records
// stage 3's trace), then `iterations` timed steps whose wall times (rank 0, start of the step
// to the end of Step()) are reported as manual time. Stage 0 of the same world size runs first
// in the same process and is the baseline: `ratio_to_stage0` = this stage's median step time /
// stage 0's. Counters per rank (max over ranks): bytes of parameters + gradients + optimizer
// states (`state_bytes`), gathered parameters (`gathered_bytes`), comm buffers and activations.
//
//   build/bin/bench_zero --benchmark_format=json --benchmark_out=zero.json
//   python3 scripts/plot_zero_memory.py zero.json docs/zero_memory.png
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

#include "runtime/base/median.h"
#include "runtime/base/splitmix64.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/engine/zero_engine.h"
#include "runtime/nn/gpt.h"

namespace zs {
namespace {

constexpr int kWarmup = 2;
constexpr int kTimed = 6;
const nn::GptConfig kModel{/*vocab=*/96, /*max_seq=*/64, /*layers=*/4, /*hidden=*/128,
                           /*heads=*/4};
constexpr int kMicroBatch = 2;

struct Measured {
  std::vector<double> step_seconds;  // rank 0, timed steps
  std::vector<MemorySnapshot> memory;
};

Status RunStage(int world, int stage, Measured& out) {
  std::mutex mu;
  CommOptions options;
  return RunLocalRanks(
      world, options,
      [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto gpt, nn::Gpt::Create(kModel, &tracker));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        EngineConfig config;
        config.zero_optimization.stage = stage;
        config.zero_optimization.overlap_comm = true;
        config.zero_optimization.reduce_bucket_size = 200'000;
        config.zero_optimization.stage3_prefetch_bucket_size = 400'000;
        config.zero_optimization.stage3_max_live_parameters = 1'000'000;
        config.zero_optimization.stage3_param_persistence_threshold = 1000;
        config.bf16.enabled = true;
        ZS_ASSIGN_OR_RETURN(auto engine,
                            ZeroEngine::Create(config, gpt->spec(), gpt->Init(1), *device, comm));
        const int64_t T = kModel.max_seq;
        std::vector<int32_t> in(size_t(kMicroBatch * T)), target(in.size());
        std::vector<double> times;
        for (int step = 0; step < kWarmup + kTimed; ++step) {
          for (size_t i = 0; i < in.size(); ++i) {
            in[i] = int32_t(SplitMix64(uint64_t(step) << 32 ^ (uint64_t(rank) << 20) ^ i) % 96);
            target[i] =
                int32_t(SplitMix64(~(uint64_t(step) << 32 ^ (uint64_t(rank) << 20) ^ i)) % 96);
          }
          ZS_RETURN_IF_ERROR(comm.Barrier());  // every rank starts the step together
          auto t0 = std::chrono::steady_clock::now();
          ZS_RETURN_IF_ERROR(gpt->ForwardBackward(*engine, in, target, kMicroBatch, T).status());
          ZS_RETURN_IF_ERROR(engine->Step().status());
          ZS_RETURN_IF_ERROR(comm.Barrier());  // the step ends when the slowest rank is done
          if (step >= kWarmup) {
            times.push_back(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          }
        }
        if (rank == 0) {
          std::lock_guard<std::mutex> lock(mu);
          out.step_seconds = times;
        }
        return OkStatus();
      },
      &out.memory);
}

std::map<int, double>& Stage0Median() {
  static std::map<int, double> m;
  return m;
}

void BM_ZeroStep(benchmark::State& state) {
  const int world = int(state.range(0));
  const int stage = int(state.range(1));
  Measured m;
  Status s = RunStage(world, stage, m);
  if (!s.ok()) {
    state.SkipWithError(s.ToString().c_str());
    return;
  }
  size_t i = 0;
  for (auto _ : state) state.SetIterationTime(m.step_seconds[i++ % m.step_seconds.size()]);
  const double median = Median(m.step_seconds);
  if (stage == 0) Stage0Median()[world] = median;
  auto max_over_ranks = [&](auto f) {
    int64_t v = 0;
    for (const MemorySnapshot& snap : m.memory) v = std::max(v, f(snap));
    return double(v);
  };
  auto peak = [](MemoryCategory c) {
    return [c](const MemorySnapshot& snap) { return snap.Peak(MemoryTier::kDevice, c); };
  };
  state.counters["state_bytes"] = max_over_ranks([](const MemorySnapshot& snap) {
    return snap.Peak(MemoryTier::kDevice, MemoryCategory::kParameters) +
           snap.Peak(MemoryTier::kDevice, MemoryCategory::kGradients) +
           snap.Peak(MemoryTier::kDevice, MemoryCategory::kOptimizerStates);
  });
  state.counters["gathered_bytes"] = max_over_ranks(peak(MemoryCategory::kGatheredParameters));
  state.counters["comm_buffer_bytes"] = max_over_ranks(peak(MemoryCategory::kCommBuffers));
  state.counters["device_peak_bytes"] =
      max_over_ranks([](const MemorySnapshot& snap) { return snap.TierPeak(MemoryTier::kDevice); });
  state.counters["median_step_s"] = median;
  state.counters["world"] = world;
  state.counters["stage"] = stage;
  state.counters["tokens_per_s"] = double(world * kMicroBatch * kModel.max_seq) / median;
  if (auto it = Stage0Median().find(world); it != Stage0Median().end()) {
    state.counters["ratio_to_stage0"] = median / it->second;
  }
}

BENCHMARK(BM_ZeroStep)
    ->ArgNames({"world", "stage"})
    ->ArgsProduct({{1, 2, 4}, {0, 1, 2, 3}})
    ->Iterations(kTimed)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace zs

BENCHMARK_MAIN();
