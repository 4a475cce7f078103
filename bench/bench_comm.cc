// bench_comm: bus bandwidth of every collective, per backend and world size, with a memcpy
// baseline measured in the same run.
//
// Ranks are threads of this process (Google Benchmark's ->Threads(N): thread i is rank i), so
// one binary measures `local` and `fabric` (each fabric rank opens its own endpoint; over shm
// they talk through the same shared-memory path as separate processes would).
//
// Counters follow nccl-tests (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
//   size      bytes of the full buffer (all_gather: the gathered output; reduce_scatter: the
//             input; all_reduce and broadcast: the buffer),
//   algbw     size / time,
//   busbw     algbw * factor: all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n,
//             broadcast 1,
// reported in bytes/s (Google Benchmark prints them with k/M/G suffixes, base 1000).
// The memcpy baseline copies `size` bytes with one thread; its bandwidth is size / time.
//
// Run: build/bin/bench_comm [--benchmark_filter=fabric/shm] [--benchmark_min_time=0.2]
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/log.h"
#include "runtime/comm/backend_registry.h"
#include "runtime/comm/communicator.h"
#include "runtime/topology/store.h"

namespace zs {
namespace {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast };

const char* CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kBroadcast: return "broadcast";
  }
  return "?";
}

double BusFactor(Collective c, int n) {
  switch (c) {
    case Collective::kAllReduce: return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter: return double(n - 1) / n;
    case Collective::kBroadcast: return 1.0;
  }
  return 1.0;
}

// One world of `size` communicators per (backend, transport, size), created on first use by the
// benchmark threads themselves (each connects its own rank) and kept for the whole run.
struct World {
  InProcessStore store;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<Status> connect_status;
  std::mutex mu;
};

World& GetWorld(const std::string& key, int size) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<World>>* worlds =
      new std::map<std::string, std::unique_ptr<World>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& w = (*worlds)[key];
  if (!w) {
    w = std::make_unique<World>();
    w->comms.resize(size);
    w->connect_status.resize(size);
  }
  return *w;
}

// Returns this thread's communicator, connecting it on first use (collective over the threads).
Communicator* RankComm(benchmark::State& state, const std::string& backend_name,
                       const std::string& transport) {
  const int size = state.threads();
  const int rank = state.thread_index();
  const std::string key = backend_name + "/" + transport + "/" + std::to_string(size);
  World& world = GetWorld(key, size);
  {
    std::lock_guard<std::mutex> lock(world.mu);
    if (world.comms[rank]) return world.comms[rank].get();
    if (!world.connect_status[rank].ok()) return nullptr;
  }
  auto backend = FindBackend(backend_name);
  if (!backend.ok()) return nullptr;
  CommOptions options;
  options.group_name = key;
  options.transport = transport;
  options.timeout = std::chrono::milliseconds(120'000);
  auto comm = (*backend)->Connect(world.store, rank, size, options);
  std::lock_guard<std::mutex> lock(world.mu);
  if (!comm.ok()) {
    world.connect_status[rank] = comm.status();
    return nullptr;
  }
  world.comms[rank] = std::move(comm).value();
  return world.comms[rank].get();
}

void BM_Collective(benchmark::State& state, std::string backend_name, std::string transport,
                   Collective collective) {
  const size_t bytes = size_t(state.range(0));
  const int n = state.threads();
  Communicator* comm = RankComm(state, backend_name, transport);
  if (comm == nullptr) {
    state.SkipWithError(("cannot connect " + backend_name + "/" + transport).c_str());
    return;
  }
  const size_t elems = bytes / sizeof(float);
  // Per-rank buffers sized per collective, so `size` is the nccl-tests size of each.
  size_t send_elems = elems, recv_elems = elems, count = elems;
  if (collective == Collective::kAllGather) {
    count = elems / n;
    send_elems = count;
    recv_elems = count * n;
  } else if (collective == Collective::kReduceScatter) {
    count = elems / n;
    send_elems = count * n;
    recv_elems = count;
  }
  std::vector<float> send(send_elems, 1.0f + float(comm->rank()));
  std::vector<float> recv(recv_elems, 0.0f);
  for (auto _ : state) {
    Status s;
    switch (collective) {
      case Collective::kAllReduce:
        s = comm->AllReduce(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum);
        break;
      case Collective::kAllGather:
        s = comm->AllGather(send.data(), recv.data(), count, DType::kF32);
        break;
      case Collective::kReduceScatter:
        s = comm->ReduceScatter(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum);
        break;
      case Collective::kBroadcast:
        s = comm->Broadcast(recv.data(), count, DType::kF32, 0);
        break;
    }
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
  }
  if (state.thread_index() == 0) {
    const double size = double(collective == Collective::kAllGather ||
                                       collective == Collective::kReduceScatter
                                   ? count * n * sizeof(float)
                                   : count * sizeof(float));
    state.counters["size"] = size;
    state.counters["algbw"] = benchmark::Counter(size, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["busbw"] = benchmark::Counter(size * BusFactor(collective, n),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  }
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = size_t(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.counters["size"] = double(bytes);
  state.counters["algbw"] = benchmark::Counter(double(bytes), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["busbw"] = benchmark::Counter(double(bytes), benchmark::Counter::kIsIterationInvariantRate);
}

void SizeRange(benchmark::internal::Benchmark* b) {
  for (int64_t s = int64_t{1} << 20; s <= int64_t{256} << 20; s *= 4) b->Arg(s);
}

void RegisterAll() {
  RegisterBuiltinBackends();
  benchmark::RegisterBenchmark("memcpy", BM_Memcpy)->Apply(SizeRange)->UseRealTime();
  struct Target {
    std::string backend, transport;
  };
  std::vector<Target> targets = {{"local", ""}, {"fabric", "shm"}, {"fabric", "tcp"}};
  for (const Target& t : targets) {
    auto backend = FindBackend(t.backend);
    if (!backend.ok() || !(*backend)->Available().ok()) continue;
    for (Collective c : {Collective::kAllReduce, Collective::kAllGather,
                         Collective::kReduceScatter, Collective::kBroadcast}) {
      std::string name = t.backend + (t.transport.empty() ? "" : "/" + t.transport) + "/" +
                         CollectiveName(c);
      benchmark::RegisterBenchmark(name.c_str(), BM_Collective, t.backend, t.transport, c)
          ->Apply(SizeRange)
          ->Threads(2)
          ->Threads(4)
          ->UseRealTime()
          ->MeasureProcessCPUTime();
    }
  }
}

}  // namespace
}  // namespace zs

int main(int argc, char** argv) {
  zs::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
