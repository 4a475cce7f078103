// bench_comm: bus bandwidth of every collective, per backend and world size, with ranks as
// threads of this process and with ranks as processes under zerorun, and a memcpy baseline
// measured in the same run.
//
// Two modes, chosen by how the program is started:
// - Threads (plain start): Google Benchmark's ->Threads(N), thread i is rank i, for `local`
//   and `fabric` over shm and tcp (each fabric rank opens its own endpoint). Also `memcpy`.
// - Processes (under zerorun, which sets ZS_WORLD_SIZE > 1): every process is one rank of a
//   fabric world (ConnectFromEnvironment; provider as the backend picks it, ZS_FABRIC_PROVIDER
//   to force one). Every process runs the same benchmarks in the same order; inside each the
//   ranks agree on an iteration count (a timed calibration, max over ranks) and time the loop
//   themselves (manual time), so no rank ever runs a collective the others do not. Rank 0
//   prints and writes --benchmark_out; the others report nothing.
//     build/bin/zerorun -n 4 --backend fabric -- build/bin/bench_comm --benchmark_min_time=0.2
//
// Counters follow nccl-tests (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
//   size        bytes of the full buffer (all_gather: the gathered output; reduce_scatter: the
//               input; all_reduce and broadcast: the buffer; sendrecv: one message),
//   algbw       size / time of one collective,
//   busbw       algbw * factor: all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n,
//               broadcast 1, sendrecv 1,
//   clock_busbw busbw from rank 0's own clock of its timed loop (bytes x its iterations / its
//               seconds), independent of Google Benchmark's counter arithmetic,
//   us_per_op   rank 0's clocked microseconds per collective,
// in bytes/s (printed with k/M/G suffixes, base 1000).
// [Note: rates of threaded benchmarks] Google Benchmark sums a counter over threads, divides a
// rate by the mean per-thread time, and multiplies kIsIterationInvariant by the iterations of
// ALL threads. So a per-collective size set as kIsIterationInvariantRate, even on one thread
// only, reports N x the true rate at N ranks (this benchmark did so until 2026-12). Here every
// thread sets (size x its own iterations) as kAvgThreadsRate: the sum over N threads divided by
// N and by the mean time is the per-rank rate. For the same reason the "Time" and
// "Iterations" columns of a threaded run are per (iterations of all threads): read us_per_op.
// The check: after each run the reporter compares busbw with clock_busbw and the program
// exits 1 (naming the run) when they differ by more than 5%.
//
// "sendrecv" is the point-to-point case: every rank sends one message to rank+1 and receives one
// from rank-1, both started before either is waited (a ring exchange, as pipeline stages do).
//
// Flags (besides Google Benchmark's): --zs_sizes_mib=1,16,128 (sizes of the collectives;
// fractions of a MiB for small messages, rounded down to a multiple of 64 bytes, at least 64).
//
// Run: build/bin/bench_comm [--benchmark_filter=fabric/shm] [--benchmark_min_time=0.2]
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/log.h"
#include "runtime/base/termination_signals.h"
#include "runtime/comm/backend_registry.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/connect.h"
#include "runtime/topology/launch_info.h"
#include "runtime/topology/store.h"

namespace zs {
namespace {

using Clock = std::chrono::steady_clock;

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kSendRecv };
constexpr Collective kCollectives[] = {Collective::kAllReduce, Collective::kAllGather,
                                       Collective::kReduceScatter, Collective::kBroadcast,
                                       Collective::kSendRecv};

const char* CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kSendRecv:
      return "sendrecv";
  }
  return "?";
}

double BusFactor(Collective c, int n) {
  switch (c) {
    case Collective::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return double(n - 1) / n;
    case Collective::kBroadcast:
    case Collective::kSendRecv:
      return 1.0;
  }
  return 1.0;
}

// Buffers of one rank for one collective of `bytes` (the nccl-tests size) at world size n.
struct Operation {
  Operation(Collective collective, size_t bytes, int n, int rank)
      : collective(collective), next((rank + 1) % n), prev((rank + n - 1) % n) {
    const size_t elems = bytes / sizeof(float);
    size_t send_elems = elems, recv_elems = elems;
    count = elems;
    if (collective == Collective::kAllGather) {
      count = elems / n;
      send_elems = count;
      recv_elems = count * n;
    } else if (collective == Collective::kReduceScatter) {
      count = elems / n;
      send_elems = count * n;
      recv_elems = count;
    }
    size = double(collective == Collective::kAllGather || collective == Collective::kReduceScatter
                      ? count * n * sizeof(float)
                      : count * sizeof(float));
    send.assign(send_elems, 1.0f + float(rank));
    recv.assign(recv_elems, 0.0f);
  }
  Status Run(Communicator& comm) {
    switch (collective) {
      case Collective::kAllReduce:
        return comm.AllReduce(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum);
      case Collective::kAllGather:
        return comm.AllGather(send.data(), recv.data(), count, DType::kF32);
      case Collective::kReduceScatter:
        return comm.ReduceScatter(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum);
      case Collective::kBroadcast:
        return comm.Broadcast(recv.data(), count, DType::kF32, 0);
      case Collective::kSendRecv: {
        if (comm.size() == 1) return OkStatus();
        CommHandle sent = comm.StartSend(send.data(), count, DType::kF32, next);
        CommHandle received = comm.StartRecv(recv.data(), count, DType::kF32, prev);
        Status s = sent.Wait(), r = received.Wait();
        return s.ok() ? r : s;
      }
    }
    return OkStatus();
  }

  Collective collective;
  int next = 0, prev = 0;  // sendrecv: the ranks this one sends to and receives from
  size_t count = 0;
  double size = 0;  // the nccl-tests size in bytes
  std::vector<float> send, recv;
};

// The counters of one rank that ran `iterations` collectives of `size` bytes; `seconds` is
// rank 0's clock of them (only rank 0 sets the clock counters). See [Note: rates of threaded
// benchmarks]: every thread must call this.
void SetCounters(benchmark::State& state, double size, double factor, double iterations,
                 double seconds, bool clock_rank) {
  state.counters["size"] = benchmark::Counter(size, benchmark::Counter::kAvgThreads);
  state.counters["algbw"] =
      benchmark::Counter(size * iterations, benchmark::Counter::kAvgThreadsRate);
  state.counters["busbw"] =
      benchmark::Counter(size * factor * iterations, benchmark::Counter::kAvgThreadsRate);
  if (clock_rank && seconds > 0 && iterations > 0) {
    state.counters["clock_busbw"] = size * factor * iterations / seconds;
    state.counters["us_per_op"] = seconds / iterations * 1e6;
  }
}

// ---- ranks as threads -----------------------------------------------------------------------

// One world of `size` communicators per (backend, transport, size), created on first use by the
// benchmark threads themselves (each connects its own rank) and kept for the whole run.
struct World {
  InProcessStore store;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<Status> connect_status;
  std::mutex mu;
};

// Every world of the run. Closed by CloseWorlds() at the end of main(): a fabric endpoint left
// open keeps its /dev/shm region (16 MiB for shm) after the process exits.
std::mutex worlds_mu;
std::map<std::string, std::unique_ptr<World>>& Worlds() {
  static auto* worlds = new std::map<std::string, std::unique_ptr<World>>();
  return *worlds;
}

void CloseWorlds() {
  std::lock_guard<std::mutex> lock(worlds_mu);
  Worlds().clear();  // no benchmark thread runs any more: every rank is idle
}

World& GetWorld(const std::string& key, int size) {
  std::lock_guard<std::mutex> lock(worlds_mu);
  auto& w = Worlds()[key];
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
  const int n = state.threads();
  Communicator* comm = RankComm(state, backend_name, transport);
  if (comm == nullptr) {
    state.SkipWithError(("cannot connect " + backend_name + "/" + transport).c_str());
    return;
  }
  Operation op(collective, size_t(state.range(0)), n, comm->rank());
  Clock::time_point first{}, last{};
  int64_t iterations = 0;
  for (auto _ : state) {
    if (iterations++ == 0) first = Clock::now();
    Status s = op.Run(*comm);
    last = Clock::now();
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
  }
  SetCounters(state, op.size, BusFactor(collective, n), double(state.iterations()),
              std::chrono::duration<double>(last - first).count(), state.thread_index() == 0);
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = size_t(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  Clock::time_point first{}, last{};
  int64_t iterations = 0;
  for (auto _ : state) {
    if (iterations++ == 0) first = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    last = Clock::now();
  }
  SetCounters(state, double(bytes), 1.0, double(state.iterations()),
              std::chrono::duration<double>(last - first).count(), true);
}

// ---- ranks as processes ---------------------------------------------------------------------

Communicator* g_process_comm = nullptr;  // the world of this process (process mode only)
double g_min_time = 0.5;                 // --benchmark_min_time, seconds per benchmark

// One benchmark iteration = one calibrated, clocked loop of collectives (manual time).
void BM_ProcessCollective(benchmark::State& state, Collective collective) {
  Communicator& comm = *g_process_comm;
  const int n = comm.size();
  Operation op(collective, size_t(state.range(0)), n, comm.rank());
  for (auto _ : state) {
    // Calibration: a warm-up, then two timed; every rank takes the slowest rank's time, so all
    // agree on the count.
    Status s = op.Run(comm);
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; s.ok() && i < 2; ++i) s = op.Run(comm);
    float per_op = std::chrono::duration<float>(Clock::now() - t0).count() / 2;
    if (s.ok()) s = comm.AllReduce(&per_op, &per_op, 1, DType::kF32, ReduceOp::kMax);
    const int64_t iterations =
        std::clamp<int64_t>(int64_t(std::ceil(g_min_time / std::max(per_op, 1e-7f))), 3, 100'000);
    if (s.ok()) s = comm.Barrier();
    const Clock::time_point start = Clock::now();
    for (int64_t i = 0; s.ok() && i < iterations; ++i) s = op.Run(comm);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    state.SetIterationTime(seconds);
    SetCounters(state, op.size, BusFactor(collective, n), double(iterations), seconds,
                comm.rank() == 0);
  }
}

// Rank 0 prints; the others report nothing.
class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

// ---- the clock check ------------------------------------------------------------------------

// Prints as the console reporter does, and compares each reported busbw with the clocked one.
class ClockCheckReporter : public benchmark::ConsoleReporter {
 public:
  explicit ClockCheckReporter(bool color) : ConsoleReporter(color ? OO_ColorTabular : OO_Tabular) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name != "mean" &&
          run.aggregate_name != "median") {
        continue;
      }
      auto reported = run.counters.find("busbw"), clocked = run.counters.find("clock_busbw");
      if (reported == run.counters.end() || clocked == run.counters.end()) continue;
      const double ratio = reported->second.value / clocked->second.value;
      ++checked_;
      if (!(std::abs(ratio - 1.0) <= kTolerance)) {
        ++failed_;
        std::fprintf(stderr,
                     "bench_comm: CLOCK CHECK FAILED for %s: reported busbw %.4g B/s is %.3fx "
                     "the clocked %.4g B/s (tolerance %.0f%%)\n",
                     run.benchmark_name().c_str(), reported->second.value, ratio,
                     clocked->second.value, kTolerance * 100);
      }
    }
  }
  int checked() const { return checked_; }
  int failed() const { return failed_; }

 private:
  static constexpr double kTolerance = 0.05;
  int checked_ = 0;
  int failed_ = 0;
};

// ---- registration ---------------------------------------------------------------------------

std::vector<int64_t> g_sizes = {int64_t{1} << 20, int64_t{16} << 20, int64_t{128} << 20};

void ApplySizes(benchmark::internal::Benchmark* b) {
  for (int64_t s : g_sizes) b->Arg(s);
}

void RegisterThreaded() {
  RegisterBuiltinBackends();
  benchmark::RegisterBenchmark("memcpy", BM_Memcpy)->Apply(ApplySizes)->UseRealTime();
  struct Target {
    std::string backend, transport;
  };
  std::vector<Target> targets = {{"local", ""}, {"fabric", "shm"}, {"fabric", "tcp"}};
  for (const Target& t : targets) {
    auto backend = FindBackend(t.backend);
    if (!backend.ok() || !(*backend)->Available().ok()) continue;
    for (Collective c : kCollectives) {
      std::string name =
          t.backend + (t.transport.empty() ? "" : "/" + t.transport) + "/" + CollectiveName(c);
      benchmark::RegisterBenchmark(name.c_str(), BM_Collective, t.backend, t.transport, c)
          ->Apply(ApplySizes)
          ->Threads(2)
          ->Threads(4)
          ->UseRealTime()
          ->MeasureProcessCPUTime();
    }
  }
}

void RegisterProcesses(int world) {
  for (Collective c : kCollectives) {
    const std::string name =
        "procs:" + std::to_string(world) + "/fabric/" + std::string(CollectiveName(c));
    benchmark::RegisterBenchmark(name.c_str(), BM_ProcessCollective, c)
        ->Apply(ApplySizes)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

// Our flags, removed from argv; --benchmark_min_time is read, not removed.
bool ParseOwnFlags(int* argc, char** argv) {
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--zs_sizes_mib=", 0) == 0) {
      g_sizes.clear();
      std::stringstream list(arg.substr(15));
      for (std::string item; std::getline(list, item, ',');) {
        const double mib = std::atof(item.c_str());
        if (mib <= 0) {
          std::fprintf(stderr, "bench_comm: bad size '%s' in %s\n", item.c_str(), arg.c_str());
          return false;
        }
        g_sizes.push_back(std::max<int64_t>(64, int64_t(mib * (1 << 20)) / 64 * 64));
      }
      continue;
    }
    if (arg.rfind("--benchmark_min_time=", 0) == 0) g_min_time = std::atof(arg.c_str() + 21);
    argv[out++] = argv[i];
  }
  *argc = out;
  return true;
}

}  // namespace
}  // namespace zs

int main(int argc, char** argv) {
  zs::TakeBackTerminationSignals("bench_comm");  // [Note: termination signals]
  if (!zs::ParseOwnFlags(&argc, argv)) return 2;
  zs::StatusOr<zs::LaunchInfo> launch = zs::DetectLaunch();
  if (!launch.ok()) {
    std::fprintf(stderr, "bench_comm: %s\n", launch.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<zs::EnvironmentCommunicator> world;
  const bool processes = launch->world_size > 1;
  if (processes) {
    auto connected = zs::ConnectFromEnvironment("fabric");
    if (!connected.ok()) {
      std::fprintf(stderr, "bench_comm: %s\n", connected.status().ToString().c_str());
      return 1;
    }
    world = std::move(*connected);
    zs::g_process_comm = world.get();
    zs::RegisterProcesses(world->size());
    if (world->rank() != 0) {
      // Only rank 0 writes --benchmark_out (every rank would open and truncate the file).
      int out = 1;
      for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], "--benchmark_out", 15) != 0) argv[out++] = argv[i];
      }
      argc = out;
    }
  } else {
    zs::RegisterThreaded();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Colors only on a terminal (the flag --benchmark_color applies to the default reporter only).
  zs::ClockCheckReporter checked(isatty(STDOUT_FILENO) != 0);
  zs::NullReporter silent;
  if (processes && world->rank() != 0) {
    benchmark::RunSpecifiedBenchmarks(&silent);
  } else {
    benchmark::RunSpecifiedBenchmarks(&checked);
  }
  benchmark::Shutdown();
  zs::CloseWorlds();
  int rc = 0;
  if (world != nullptr) {
    // No rank leaves while a peer may still be talking to it.
    if (zs::Status s = world->Barrier(); !s.ok()) {
      std::fprintf(stderr, "bench_comm: closing barrier: %s\n", s.ToString().c_str());
      rc = 1;
    }
  }
  if (checked.failed() > 0) {
    std::fprintf(stderr, "bench_comm: %d of %d runs report a rate their own clock disagrees with\n",
                 checked.failed(), checked.checked());
    rc = 1;
  }
  return rc;
}
