// bench_optimizers: the CPU optimizer step (optimizers/cpu_optimizer.h) against the memory
// floor of the same byte traffic, measured in the same binary and run.
//
// For each optimizer x state dtype x shard size x thread count, two benchmarks run back to
// back on the same arrays:
//   BM_Floor/...  reads and writes exactly the arrays the step reads and writes, in place,
//                 with trivial arithmetic (one add per array), over the same tiles and threads:
//                 no step that moves these bytes can go faster.
//   BM_Step/...   CpuOptimizer::Step.
// Counters: bytes_per_second (every byte the step must read and write, SetBytesProcessed),
// items_per_second (parameters/s), bytes_per_param, and on BM_Step `ratio_to_floor` = the
// floor's time / the step's time (1.0 = at the memory limit).
//
// BM_VsFp32States/... (AdamW with bf16 or int8 states): each iteration steps a reduced-state
// shard and an fp32-state shard of the same size, alternating which goes first, so that the
// host's memory speed, which drifts between runs on shared machines, is the same for both.
// Its time is the reduced-state step's (manual time); `speedup_vs_fp32_states` = the fp32-state
// step's total time / the reduced-state step's (the 1.4x goal for bf16 states), and
// `fp32_states_ms` the fp32-state step's mean.
//
// param_out, the one array the step only writes, goes through non-temporal stores where the
// step's arrays exceed a quarter of the last-level cache, in the floor as in the step ([Note:
// streaming param_out] in optimizers/optimizer_spec.h; the label says "streamed param_out");
// --param_out_stores=cached|streaming forces one kind for every size (BM_StreamedVsCached
// keeps both). BM_StreamedVsCached/... (AdamW, each state dtype): each iteration steps the
// shard with both kinds of store, alternating which goes first; its time is the streamed
// step's, `speedup_vs_cached` = the cached steps' total time / the streamed steps'.
//
// Software prefetch ([Note: software prefetch] in optimizers/optimizer_spec.h) is on where
// CpuOptimizer::PrefetchElements says (the label says "prefetch N");
// --prefetch_elements=-1|0|N sets it for every shard. BM_PrefetchVsNone/... (every case): each
// iteration steps the shard with and without prefetching, alternating which goes first; its
// time is the prefetching step's, `speedup_vs_no_prefetch` = the other's total / its total.
//
// --params=N[,N...] adds shard sizes (1 and 2 threads) to the fixed ones, e.g. to find the
// working set beyond which streaming and prefetching pay on a host.
//
// The goal table (add --simd=AVX2 etc. to pin a Highway target):
//   build/bin/bench_optimizers --benchmark_filter='params:200000000/threads:2'
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// and the reduced-state goals alone:
//   build/bin/bench_optimizers --benchmark_filter='BM_VsFp32States/.*params:200000000/threads:2'
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/floor_kernel.h"
#include "hwy/targets.h"
#include "optimizers/cpu_optimizer.h"
#include "optimizers/optimizer_spec.h"
#include "optimizers/state_codec.h"

namespace zs {
namespace {

// Page-aligned, first touched by the threads that will use it (tile ownership as in the step).
struct Array {
  void* data = nullptr;
  size_t bytes = 0;
  explicit Array(size_t b) : bytes(b) { data = std::aligned_alloc(4096, (b + 4095) / 4096 * 4096); }
  ~Array() { std::free(data); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Runs fn(tile_begin, tile_end) over CpuOptimizer's tiles on `threads` threads (the caller is
// one of them), claiming tiles dynamically as the optimizer does.
void ParallelTiles(int threads, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t tile = CpuOptimizer::TileFor(n, threads, CpuOptimizer::kDefaultTileElements);
  const int64_t tiles = (n + tile - 1) / tile;
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t t; (t = next.fetch_add(1)) < tiles;) fn(t * tile, std::min(n, (t + 1) * tile));
  };
  std::vector<std::thread> helpers;
  for (int i = 1; i < threads; ++i) helpers.emplace_back(work);
  work();
  for (auto& h : helpers) h.join();
}

// ShardStep::param_out_stores of every shard (--param_out_stores).
ParamOutStores g_param_out_stores = ParamOutStores::kAuto;
// ShardStep::prefetch_elements of every shard (--prefetch_elements).
int64_t g_prefetch_elements = kAutoPrefetch;
// Shard sizes registered besides the fixed ones (--params), with 1 and 2 threads.
std::vector<int64_t> g_extra_params;

struct Shard {
  OptimizerHyper hyper;
  StateDType state_dtype;
  int64_t n;
  int states;
  std::unique_ptr<Array> master, grad, param_out, state[2], scale[2];
  std::vector<ShardSegment> segments;
  ShardStep step;

  int64_t BytesPerParam() const {
    // master r+w, grad r (bf16), param_out w (bf16), each state r+w (codes; int8 + scales).
    double b = 8 + 2 + 2;
    for (int i = 0; i < states; ++i) b += 2.0 * double(StateBytes(state_dtype, n)) / double(n);
    return int64_t(b + 0.5);
  }
};

std::unique_ptr<Shard> MakeShard(OptimizerKind kind, StateDType type, int64_t n, int threads) {
  auto s = std::make_unique<Shard>();
  s->hyper.kind = kind;
  s->hyper.lr = 1e-3f;
  s->hyper.beta1 = 0.9f;
  s->hyper.beta2 = kind == OptimizerKind::kLion ? 0.99f : 0.999f;
  s->hyper.step = 10;
  s->state_dtype = type;
  s->n = n;
  s->states = NumStates(kind, s->hyper.beta1);
  s->master = std::make_unique<Array>(size_t(n) * 4);
  s->grad = std::make_unique<Array>(size_t(n) * 2);
  s->param_out = std::make_unique<Array>(size_t(n) * 2);
  for (int i = 0; i < s->states; ++i) {
    s->state[i] =
        std::make_unique<Array>(size_t(type == StateDType::kInt8 ? n : StateBytes(type, n)));
    if (type == StateDType::kInt8) {
      s->scale[i] = std::make_unique<Array>(size_t((n + kQuantBlock - 1) / kQuantBlock) * 4);
    }
  }
  // Realistic values (never zeros), written by the threads that will use each tile.
  ParallelTiles(threads, n, [&](int64_t b, int64_t e) {
    std::vector<float> tmp(size_t(e - b));
    for (int64_t i = b; i < e; ++i) {
      const float x = float((i * 2654435761u) % 1000003) / 1000003.0f;
      s->master->as<float>()[i] = x - 0.5f;
      s->grad->as<uint16_t>()[i] = uint16_t(std::bit_cast<uint32_t>((x - 0.5f) * 1e-2f) >> 16);
      s->param_out->as<uint16_t>()[i] = 0;  // fault every page in before anything is timed
      tmp[size_t(i - b)] = x * 1e-3f + 1e-6f;
    }
    for (int k = 0; k < s->states; ++k) {
      EncodeState(type, tmp.data(), b, e - b,
                  static_cast<char*>(s->state[k]->data) + (type == StateDType::kF32    ? 4
                                                           : type == StateDType::kBF16 ? 2
                                                                                       : 1) *
                                                              b,
                  s->scale[k] ? s->scale[k]->as<float>() + b / kQuantBlock : nullptr, 1, 1, k);
    }
  });
  s->segments = {{0, n / 3, 0.0f}, {n / 3, n, 0.1f}};
  ShardStep& st = s->step;
  st.n = n;
  st.master = s->master->as<float>();
  for (int i = 0; i < s->states; ++i) {
    st.state[i] = s->state[i]->data;
    st.state_scale[i] = s->scale[i] ? s->scale[i]->as<float>() : nullptr;
  }
  st.state_dtype = type;
  st.grad = s->grad->data;
  st.grad_dtype = DType::kBF16;
  st.grad_scale = 1.0f;
  st.param_out = s->param_out->data;
  st.param_dtype = DType::kBF16;
  st.param_out_stores = g_param_out_stores;
  st.prefetch_elements = g_prefetch_elements;
  st.segments = s->segments;
  st.seed = 7;
  return s;
}

// The floor (bench/floor_kernel.h) over the step's tiles and threads, streaming param_out
// where the step does; int8 block scales get one add each as well.
void FloorPass(Shard& s, int threads) {
  const bool stream = CpuOptimizer::StreamsParamOut(s.hyper, s.step);
  ParallelTiles(threads, s.n, [&](int64_t b, int64_t e) {
    FloorTile(s.master->as<float>(), s.grad->as<uint16_t>(), s.param_out->as<uint16_t>(),
              s.states > 0 ? s.state[0]->data : nullptr, s.states > 1 ? s.state[1]->data : nullptr,
              s.state_dtype, stream, b, e);
    if (s.state_dtype == StateDType::kInt8) {
      for (int k = 0; k < s.states; ++k) {
        float* sc = s.scale[k]->as<float>();
        for (int64_t j = b / kQuantBlock; j < (e + kQuantBlock - 1) / kQuantBlock; ++j) {
          sc[j] += 1.0f;
        }
      }
    }
  });
}

std::map<std::string, double>& FloorSeconds() {
  static std::map<std::string, double> m;
  return m;
}

std::string Key(const benchmark::State& state) {
  return std::to_string(state.range(0)) + "/" + std::to_string(state.range(1)) + "/" +
         std::to_string(state.range(2)) + "/" + std::to_string(state.range(3));
}

void Report(benchmark::State& state, const Shard& s) {
  const int64_t bpp = s.BytesPerParam();
  state.SetItemsProcessed(int64_t(state.iterations()) * s.n);
  state.SetBytesProcessed(int64_t(state.iterations()) * s.n * bpp);
  state.counters["bytes_per_param"] = double(bpp);
  const int64_t prefetch = CpuOptimizer::PrefetchElements(s.step);
  state.SetLabel(std::string(OptimizerKindName(s.hyper.kind)) + " " +
                 std::string(StateDTypeName(s.state_dtype)) + " states, " +
                 CpuOptimizer::SimdTarget() +
                 (CpuOptimizer::StreamsParamOut(s.hyper, s.step) ? ", streamed param_out" : "") +
                 (prefetch > 0 ? ", prefetch " + std::to_string(prefetch) : ""));
}

// Args: kind, state dtype, parameters, threads.
void BM_Floor(benchmark::State& state) {
  auto s = MakeShard(OptimizerKind(state.range(0)), StateDType(state.range(1)), state.range(2),
                     int(state.range(3)));
  FloorPass(*s, int(state.range(3)));  // warm-up: caches, TLBs, the same state as BM_Step
  double total = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    FloorPass(*s, int(state.range(3)));
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  FloorSeconds()[Key(state)] = total / double(state.iterations());
  Report(state, *s);
}

void BM_Step(benchmark::State& state) {
  const int threads = int(state.range(3));
  auto s =
      MakeShard(OptimizerKind(state.range(0)), StateDType(state.range(1)), state.range(2), threads);
  CpuOptimizer optimizer(threads);
  optimizer.Step(s->hyper, s->step);  // warm-up, as BM_Floor
  ++s->hyper.step;
  double total = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    optimizer.Step(s->hyper, s->step);
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++s->hyper.step;
  }
  Report(state, *s);
  if (auto it = FloorSeconds().find(Key(state)); it != FloorSeconds().end()) {
    state.counters["ratio_to_floor"] = it->second / (total / double(state.iterations()));
  }
}

// One timed Step of `s` (seconds); the step counter advances.
double TimedStep(CpuOptimizer& optimizer, Shard& s) {
  const auto t0 = std::chrono::steady_clock::now();
  optimizer.Step(s.hyper, s.step);
  ++s.hyper.step;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The A/B benchmarks: each iteration times `a` and `b` (each returns its seconds), alternating
// which goes first, so that both see the same memory speed, which drifts between runs on
// shared machines. The benchmark's time is a's (manual time); returns b's total / a's total.
double Alternate(benchmark::State& state, const std::function<double()>& a,
                 const std::function<double()>& b, const char* b_ms_counter) {
  a();  // warm-up, as BM_Step
  b();
  double a_total = 0, b_total = 0;
  bool a_first = true;
  for (auto _ : state) {
    double t_a = 0;
    if (a_first) {
      t_a = a();
      b_total += b();
    } else {
      b_total += b();
      t_a = a();
    }
    a_first = !a_first;
    a_total += t_a;
    state.SetIterationTime(t_a);
  }
  state.counters[b_ms_counter] = 1e3 * b_total / double(state.iterations());
  return b_total / a_total;
}

// Args: kind, reduced state dtype, parameters, threads. A: the reduced-state shard; B: an
// fp32-state shard of the same size.
void BM_VsFp32States(benchmark::State& state) {
  const OptimizerKind kind = OptimizerKind(state.range(0));
  const int threads = int(state.range(3));
  auto reduced = MakeShard(kind, StateDType(state.range(1)), state.range(2), threads);
  auto fp32 = MakeShard(kind, StateDType::kF32, state.range(2), threads);
  CpuOptimizer optimizer(threads);
  const double speedup = Alternate(
      state, [&] { return TimedStep(optimizer, *reduced); },
      [&] { return TimedStep(optimizer, *fp32); }, "fp32_states_ms");
  Report(state, *reduced);
  state.counters["speedup_vs_fp32_states"] = speedup;
}

// Args: kind, state dtype, parameters, threads. One shard stepped twice per iteration, set up by
// configure(step, true) for A and configure(step, false) for B; the label reports A's setting.
void OneShardAB(benchmark::State& state, const std::function<void(ShardStep&, bool a)>& configure,
                const char* b_ms_counter, const char* speedup_counter) {
  const int threads = int(state.range(3));
  auto s =
      MakeShard(OptimizerKind(state.range(0)), StateDType(state.range(1)), state.range(2), threads);
  CpuOptimizer optimizer(threads);
  auto step = [&](bool a) {
    configure(s->step, a);
    return TimedStep(optimizer, *s);
  };
  const double speedup = Alternate(
      state, [&] { return step(true); }, [&] { return step(false); }, b_ms_counter);
  configure(s->step, true);
  Report(state, *s);
  state.counters[speedup_counter] = speedup;
}

// A writes param_out through non-temporal stores, B through ordinary ones.
void BM_StreamedVsCached(benchmark::State& state) {
  OneShardAB(
      state,
      [](ShardStep& st, bool a) {
        st.param_out_stores = a ? ParamOutStores::kStreaming : ParamOutStores::kCached;
      },
      "cached_ms", "speedup_vs_cached");
}

// A prefetches its inputs (--prefetch_elements when it is positive, else
// CpuOptimizer::kDefaultPrefetchElements ahead), B does not ([Note: software prefetch]).
void BM_PrefetchVsNone(benchmark::State& state) {
  const int64_t distance =
      g_prefetch_elements > 0 ? g_prefetch_elements : CpuOptimizer::kDefaultPrefetchElements;
  OneShardAB(
      state, [&](ShardStep& st, bool a) { st.prefetch_elements = a ? distance : 0; },
      "no_prefetch_ms", "speedup_vs_no_prefetch");
}

// Floor then step for each configuration, in that order (the ratio needs the floor first).
void RegisterAll() {
  const std::vector<std::pair<OptimizerKind, StateDType>> cases = {
      {OptimizerKind::kAdamW, StateDType::kF32},   {OptimizerKind::kAdamW, StateDType::kBF16},
      {OptimizerKind::kAdamW, StateDType::kInt8},  {OptimizerKind::kSgd, StateDType::kF32},
      {OptimizerKind::kAdagrad, StateDType::kF32}, {OptimizerKind::kLion, StateDType::kF32},
  };
  // 65536 parameters on one thread (under 2 MiB of arrays, in L2): the compute ceiling, where
  // memory is not the limit. 1M parameters (about 28 MiB, in L3): whether the step scales to
  // two threads. 50M and 200M: the memory-bound sizes of the goals.
  std::vector<std::pair<int64_t, std::vector<int>>> sizes = {
      {65'536, {1}}, {1'048'576, {1, 2}}, {50'000'000, {1, 2}}, {200'000'000, {1, 2}}};
  for (int64_t params : g_extra_params) sizes.push_back({params, {1, 2}});
  for (const auto& [params, thread_counts] : sizes) {
    for (int threads : thread_counts) {
      for (auto [kind, type] : cases) {
        for (auto* fn : {&BM_Floor, &BM_Step}) {
          benchmark::RegisterBenchmark(fn == &BM_Floor ? "BM_Floor" : "BM_Step", fn)
              ->ArgNames({"kind", "state", "params", "threads"})
              ->Args({int64_t(kind), int64_t(type), params, threads})
              ->MinTime(0.5)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
  // The A/B benchmarks (manual time: the A side's).
  auto register_ab = [](const char* name, void (*fn)(benchmark::State&), OptimizerKind kind,
                        StateDType type, int64_t params, int threads) {
    benchmark::RegisterBenchmark(name, fn)
        ->ArgNames({"kind", "state", "params", "threads"})
        ->Args({int64_t(kind), int64_t(type), params, threads})
        ->MinTime(0.5)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  };
  for (const auto& [params, thread_counts] : sizes) {
    if (params < 1'000'000) continue;  // in cache there is no memory to share
    for (int threads : thread_counts) {
      for (StateDType type : {StateDType::kBF16, StateDType::kInt8}) {
        register_ab("BM_VsFp32States", &BM_VsFp32States, OptimizerKind::kAdamW, type, params,
                    threads);
      }
      for (auto [kind, type] : cases) {
        if (kind == OptimizerKind::kAdamW) {
          register_ab("BM_StreamedVsCached", &BM_StreamedVsCached, kind, type, params, threads);
        }
        register_ab("BM_PrefetchVsNone", &BM_PrefetchVsNone, kind, type, params, threads);
      }
    }
  }
}

}  // namespace
}  // namespace zs

// Removes the first argument that starts with `flag` ("--name=") from argv and returns its
// value; nullopt when there is none.
std::optional<std::string> TakeFlag(int& argc, char** argv, const std::string& flag) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind(flag, 0) != 0) continue;
    std::copy(argv + i + 1, argv + argc + 1, argv + i);  // argv[argc] is null
    --argc;
    return arg.substr(flag.size());
  }
  return std::nullopt;
}

// --simd=NAME pins the kernels to one Highway target (AVX3, AVX2, SSE4, SCALAR, ...) of those
// compiled in and supported here, to compare targets on one machine; the default is the best.
bool PinSimdTarget(int& argc, char** argv) {
  const std::optional<std::string> name = TakeFlag(argc, argv, "--simd=");
  if (!name) return true;
  std::string known;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    if (*name == hwy::TargetName(target)) {
      hwy::SetSupportedTargetsForTest(target);
      return true;
    }
    known += std::string(known.empty() ? "" : ", ") + hwy::TargetName(target);
  }
  std::fprintf(stderr, "bench_optimizers: --simd=%s: not a target of this build and CPU (%s)\n",
               name->c_str(), known.c_str());
  return false;
}

// --param_out_stores=auto|cached|streaming sets ShardStep::param_out_stores for every shard
// (default auto: streaming above a quarter of the last-level cache), to measure both kinds.
bool SetParamOutStores(int& argc, char** argv) {
  const std::optional<std::string> value = TakeFlag(argc, argv, "--param_out_stores=");
  if (!value) return true;
  for (auto [name, stores] : {std::pair{"auto", zs::ParamOutStores::kAuto},
                              std::pair{"cached", zs::ParamOutStores::kCached},
                              std::pair{"streaming", zs::ParamOutStores::kStreaming}}) {
    if (*value == name) {
      zs::g_param_out_stores = stores;
      return true;
    }
  }
  std::fprintf(stderr,
               "bench_optimizers: --param_out_stores=%s: expected auto, cached or streaming\n",
               value->c_str());
  return false;
}

// `text` as a decimal integer in [lo, hi], or nothing.
std::optional<long long> ParseInteger(const std::string& text, long long lo, long long hi) {
  char* end = nullptr;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || n < lo || n > hi) return std::nullopt;
  return n;
}

// --prefetch_elements=N sets ShardStep::prefetch_elements for every shard: -1 auto (the
// default), 0 none, or N elements ahead; BM_PrefetchVsNone's prefetching side uses N when N > 0.
bool SetPrefetchElements(int& argc, char** argv) {
  const std::optional<std::string> value = TakeFlag(argc, argv, "--prefetch_elements=");
  if (!value) return true;
  const std::optional<long long> n =
      ParseInteger(*value, zs::kAutoPrefetch, zs::CpuOptimizer::kMaxPrefetchElements);
  if (!n) {
    std::fprintf(stderr,
                 "bench_optimizers: --prefetch_elements=%s: expected -1 (auto), 0 (none) or 1 to "
                 "%lld elements\n",
                 value->c_str(), static_cast<long long>(zs::CpuOptimizer::kMaxPrefetchElements));
    return false;
  }
  zs::g_prefetch_elements = *n;
  return true;
}

// --params=N[,N...] registers every benchmark for these shard sizes too (1 and 2 threads), to
// find where a step's arrays stop fitting the caches.
bool SetExtraParams(int& argc, char** argv) {
  const std::optional<std::string> value = TakeFlag(argc, argv, "--params=");
  if (!value) return true;
  for (size_t pos = 0; pos <= value->size();) {
    const size_t comma = std::min(value->find(',', pos), value->size());
    const std::string item = value->substr(pos, comma - pos);
    const std::optional<long long> n = ParseInteger(item, 1, 1LL << 34);
    if (!n) {
      std::fprintf(stderr,
                   "bench_optimizers: --params=%s: '%s' is not a parameter count from 1 to 2^34\n",
                   value->c_str(), item.c_str());
      return false;
    }
    zs::g_extra_params.push_back(*n);
    pos = comma + 1;
  }
  return true;
}

int main(int argc, char** argv) {
  if (!PinSimdTarget(argc, argv) || !SetParamOutStores(argc, argv) ||
      !SetPrefetchElements(argc, argv) || !SetExtraParams(argc, argv)) {
    return 1;
  }
  zs::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
