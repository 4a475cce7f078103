// bench_offload: NVMe swap bandwidth of NvmeStore against its floor, plain O_DIRECT
// pwrite/pread of 1 MiB chunks on one thread at queue depth 1, over the same file size.
//
// Environment: ZS_BENCH_OFFLOAD_BYTES (default 256M; k/m/g suffixes) is the bytes moved per
// iteration, ZS_BENCH_OFFLOAD_DIR (default /tmp) the directory of the files. Every file is
// preallocated (as NvmeStore does) and removed after its benchmark. Reads read back data written
// before the timed loop; O_DIRECT keeps the page cache out of every number.
//
// BM_PageChecksum is the per-page hash the store runs on every page written and read: it must
// stay well above the disk's bandwidth so that checksumming is never the bottleneck.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "offload/block_checksum.h"
#include "offload/nvme_store.h"
#include "offload/shard_store.h"
#include "offload/tile_copy_pipeline.h"
#include "optimizers/cpu_optimizer.h"
#include "optimizers/optimizer_spec.h"
#include "runtime/base/median.h"
#include "runtime/base/dtype.h"
#include "runtime/base/env.h"
#include "runtime/base/splitmix64.h"
#include "runtime/device/cpu_device.h"

namespace zs {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kRawChunk = kMiB;

struct BenchConfig {
  std::string dir;
  int64_t bytes;  // a multiple of 4 MiB, so every block size divides it
};

const BenchConfig& Config() {
  static const BenchConfig config = [] {
    BenchConfig c;
    c.dir = GetEnvString("ZS_BENCH_OFFLOAD_DIR").value_or("/tmp");
    StatusOr<int64_t> bytes = ParseEnvInt("ZS_BENCH_OFFLOAD_BYTES", 256 * kMiB);
    ZS_CHECK(bytes.ok() && *bytes > 0, "ZS_BENCH_OFFLOAD_BYTES: {}", bytes.status().ToString());
    c.bytes = (*bytes + 4 * kMiB - 1) / (4 * kMiB) * (4 * kMiB);
    return c;
  }();
  return config;
}

// One 4096-aligned buffer of Config().bytes, filled with random data once, per role.
unsigned char* Buffer(bool source) {
  auto make = [](uint64_t seed) {
    const int64_t bytes = Config().bytes;
    auto* p = static_cast<unsigned char*>(std::aligned_alloc(4096, static_cast<size_t>(bytes)));
    ZS_CHECK(p != nullptr, "allocating {} bytes", bytes);
    for (int64_t i = 0; i < bytes; i += 8) {
      const uint64_t w = SplitMix64(seed + static_cast<uint64_t>(i));
      std::memcpy(p + i, &w, 8);
    }
    return p;
  };
  static unsigned char* const src = make(1);
  static unsigned char* const dst = make(2);
  return source ? src : dst;
}

// ---- the floor: O_DIRECT, one thread, one request at a time ----------------------------------

class RawFile {
 public:
  RawFile() : path_(fmt::format("{}/zerostack-bench-raw.{}.dat", Config().dir, getpid())) {
    fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
    if (fd_ >= 0 && fallocate(fd_, 0, 0, Config().bytes) != 0) error_ = "fallocate";
    if (fd_ < 0) error_ = "open";
  }
  ~RawFile() {
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
  }
  // Moves the whole file in kRawChunk pieces; false on any error or short transfer.
  bool Pass(bool write, unsigned char* buffer) {
    for (int64_t at = 0; at < Config().bytes; at += kRawChunk) {
      const ssize_t r =
          write ? pwrite(fd_, buffer + at, kRawChunk, at) : pread(fd_, buffer + at, kRawChunk, at);
      if (r != kRawChunk) return false;
    }
    return true;
  }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::string error_;
};

void RawODirect(benchmark::State& state, bool write) {
  Buffer(true);  // filled here, not in the timed loop
  RawFile file;
  if (!file.error().empty()) return state.SkipWithError((file.error() + " " + file.path()).c_str());
  if (!write && !file.Pass(/*write=*/true, Buffer(true))) return state.SkipWithError("setup write");
  for (auto _ : state) {
    if (!file.Pass(write, Buffer(write))) return state.SkipWithError("pwrite/pread failed");
  }
  state.SetBytesProcessed(state.iterations() * Config().bytes);
}
// The raw O_DIRECT bandwidth in bytes/s (best of 3 passes over Config().bytes), measured once
// per process and cached: the baseline every ratio counter below divides by.
double RawBandwidth(bool write) {
  static const std::pair<double, double> read_write = [] {
    RawFile file;
    ZS_CHECK(file.error().empty(), "{} {}", file.error(), file.path());
    double best[2] = {0, 0};
    for (int pass = 0; pass < 3; ++pass) {
      for (bool w : {true, false}) {
        const auto t0 = std::chrono::steady_clock::now();
        ZS_CHECK(file.Pass(w, Buffer(w)), "raw O_DIRECT pass on {}", file.path());
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best[w] = std::max(best[w], double(Config().bytes) / s);
      }
    }
    return std::make_pair(best[0], best[1]);
  }();
  return write ? read_write.second : read_write.first;
}

void BM_RawODirectWrite(benchmark::State& state) { RawODirect(state, /*write=*/true); }
void BM_RawODirectRead(benchmark::State& state) { RawODirect(state, /*write=*/false); }
BENCHMARK(BM_RawODirectWrite)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RawODirectRead)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- NvmeStore --------------------------------------------------------------------------------

// Args: block size in KiB, queue depth, backend (0: io_uring, 1: posix).
void Store(benchmark::State& state, bool write) {
  NvmeStoreOptions options;
  options.dir = Config().dir;
  options.name = "bench";
  options.block_size = state.range(0) * 1024;
  options.queue_depth = state.range(1);
  options.backend = state.range(2) == 0 ? IoBackend::kIoUring : IoBackend::kPosix;
  Buffer(true);  // filled here, not in the timed loop
  auto store = NvmeStore::Create(options, Config().bytes);
  if (!store.ok()) return state.SkipWithError(store.status().ToString().c_str());
  state.SetLabel(std::string(IoBackendName((*store)->backend())));
  const int64_t bytes = Config().bytes;
  if (!write) {
    if (Status s = (*store)->Write(0, Buffer(true), bytes); !s.ok()) {
      return state.SkipWithError(s.ToString().c_str());
    }
  }
  const double raw = RawBandwidth(write);  // measured before the timed loop, same file size
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s =
        write ? (*store)->Write(0, Buffer(true), bytes) : (*store)->Read(0, Buffer(false), bytes);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) return state.SkipWithError(s.ToString().c_str());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  // The goal: at least 0.9 of the raw O_DIRECT bandwidth of this run.
  state.counters["vs_raw"] = double(state.iterations() * bytes) / seconds / raw;
}
void BM_NvmeStoreWrite(benchmark::State& state) { Store(state, /*write=*/true); }
void BM_NvmeStoreRead(benchmark::State& state) { Store(state, /*write=*/false); }

void StoreArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"block_kib", "qd", "backend"});
  for (int64_t backend : {0, 1}) {
    for (int64_t block_kib : {256, 1024, 4096}) {
      for (int64_t qd : {1, 4, 8}) b->Args({block_kib, qd, backend});
    }
  }
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_NvmeStoreWrite)->Apply(StoreArgs);
BENCHMARK(BM_NvmeStoreRead)->Apply(StoreArgs);

// ---- the optimizer step with offloaded states --------------------------------------------------
//
// What the engine's StepTiles does (acquire, step, release), without a model or a network: one
// rank's AdamW step over ZS_BENCH_STEP_PARAMS elements (default 16M) with fp32 states and bf16
// gradients and parameters, in tiles of 4M elements (sub_group_size), with the states in device
// memory (the baseline), in host memory (cpu offload) or in an NVMe file (nvme offload, 4
// buffers, reads and writes pipelined). Each benchmark measures the in-memory step in the same
// run and reports its own time against it:
//   vs_in_memory   step time / in-memory step time (cpu offload goal: <= 1.15)
//   vs_goal        nvme: step time / max(in-memory step, disk floor) (goal: <= 1.2), where the
//                  disk floor is bytes read / read bandwidth + bytes written / write bandwidth
//                  (DiskBandwidth, this run, same file system)
//   disk_fraction  nvme: disk floor / step time, the share of the disk's bandwidth sustained
// The disk's bandwidth is the better of raw O_DIRECT and the store's best (DiskBandwidth).

enum class StepTier { kInMemory = 0, kCpu, kCpuHostGrads, kNvme };

class StepBench {
 public:
  static constexpr int64_t kTile = 4 << 20;

  StepBench(StepTier tier, int64_t n, int threads)
      : tier_(tier), n_(n), device_(tracker_), optimizer_(threads) {
    auto alloc = [&](int64_t bytes, MemoryTier t) {
      auto b = device_.Allocate(size_t(bytes), t, MemoryCategory::kOther);
      ZS_CHECK(b.ok(), "{}", b.status().ToString());
      std::memset(b->data(), 0, b->size());
      return std::move(*b);
    };
    const bool host_grads = tier == StepTier::kCpuHostGrads || tier == StepTier::kNvme;
    grads_ = alloc(2 * n, host_grads ? MemoryTier::kHost : MemoryTier::kDevice);
    params_ = alloc(2 * n, MemoryTier::kDevice);
    for (int64_t i = 0; i < n; ++i) {
      StoreFromFloat(grads_.data(), DType::kBF16, size_t(i), float(int(i % 17) - 8) * 1e-3f);
    }
    ShardStoreOptions options;
    options.what = "bench states";
    options.tier = tier == StepTier::kInMemory ? MemoryTier::kDevice
                   : tier == StepTier::kNvme   ? MemoryTier::kNvme
                                               : MemoryTier::kHost;
    options.nvme.dir = Config().dir;
    options.nvme.name = "bench-step";
    options.buffer_count = 4;
    std::vector<SlotShape> shapes;
    for (int64_t b = 0; b < n; b += kTile) {
      const int64_t t = std::min(kTile, n - b);
      shapes.push_back({fmt::format("[{}, {})", b, b + t), {4 * t, 4 * t, 4 * t}});
      segments_.push_back({ShardSegment{0, t, 0.01f}});
    }
    auto store = ShardStore::Create(options, std::move(shapes), device_);
    ZS_CHECK(store.ok(), "{}", store.status().ToString());
    store_ = std::move(*store);
    const bool copies = tier != StepTier::kInMemory;
    auto pipeline = TileCopyPipeline::Create(device_, copies ? 2 * kTile : 0, PinMode::kPageable);
    ZS_CHECK(pipeline.ok(), "{}", pipeline.status().ToString());
    copies_ = std::move(*pipeline);
    for (int t = 0; t < store_->num_slots(); ++t) {  // initial master 0.5, zero states
      auto view = store_->Acquire(t, ShardStore::Access::kOverwrite);
      ZS_CHECK(view.ok(), "{}", view.status().ToString());
      const int64_t len = store_->shape(t).array_bytes[0] / 4;
      std::fill_n(reinterpret_cast<float*>(view->arrays[0]), len, 0.5f);
      std::memset(view->arrays[1], 0, size_t(8 * len));
      ZS_CHECK(store_->Release(t, true).ok(), "release");
    }
    store_->EndPass();
  }

  // One optimizer step over every tile; returns its wall time.
  double Step() {
    const auto t0 = std::chrono::steady_clock::now();
    ++step_;
    OptimizerHyper hyper;
    hyper.kind = OptimizerKind::kAdamW;
    hyper.lr = 1e-3f;
    hyper.step = step_;
    std::vector<TileCopy> tiles;
    for (int t = 0; t < store_->num_slots(); ++t) {
      const int64_t b = int64_t(t) * kTile;
      const int64_t len = std::min(kTile, n_ - b);
      const bool copy = tier_ != StepTier::kInMemory;
      tiles.push_back({grads_.data_as<char>() + 2 * b, 2 * len,
                       copy && grads_.tier() == MemoryTier::kDevice,
                       params_.data_as<char>() + 2 * b, 2 * len, copy});
    }
    ZS_CHECK(copies_->Begin(std::move(tiles)).ok(), "copies");
    for (int t = 0; t < store_->num_slots(); ++t) {
      auto arrays = store_->Acquire(t);
      ZS_CHECK(arrays.ok(), "{}", arrays.status().ToString());
      auto io = copies_->Acquire(t);
      ZS_CHECK(io.ok(), "{}", io.status().ToString());
      ShardStep shard;
      shard.n = store_->shape(t).array_bytes[0] / 4;
      shard.master = reinterpret_cast<float*>(arrays->arrays[0]);
      shard.state[0] = arrays->arrays[1];
      shard.state[1] = arrays->arrays[2];
      shard.state_dtype = StateDType::kF32;
      shard.grad = io->grad;
      shard.grad_dtype = DType::kBF16;
      shard.param_out = io->param_out;
      shard.param_dtype = DType::kBF16;
      shard.segments = segments_[size_t(t)];
      shard.index_base = int64_t(t) * kTile;
      optimizer_.Step(hyper, shard);
      ZS_CHECK(copies_->Release(t).ok(), "copy");
      ZS_CHECK(store_->Release(t, true).ok(), "release");
    }
    ZS_CHECK(copies_->Finish().ok(), "finish");
    store_->EndPass();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  const ShardStore& store() const { return *store_; }

 private:
  const StepTier tier_;
  const int64_t n_;
  MemoryTracker tracker_;
  CpuDevice device_;
  DeviceBuffer grads_, params_;
  std::vector<std::vector<ShardSegment>> segments_;
  std::unique_ptr<ShardStore> store_;
  std::unique_ptr<TileCopyPipeline> copies_;
  CpuOptimizer optimizer_;
  int64_t step_ = 0;
};

int64_t StepParams() {
  static const int64_t n = [] {
    StatusOr<int64_t> v = ParseEnvInt("ZS_BENCH_STEP_PARAMS", int64_t{16} << 20);
    ZS_CHECK(v.ok() && *v > 0, "ZS_BENCH_STEP_PARAMS: {}", v.status().ToString());
    return *v;
  }();
  return n;
}

// The in-memory step's time with `threads` optimizer threads (the median of 9 after one
// warm-up), measured once in this run: the baseline of every vs_in_memory.
double InMemoryStepSeconds(int threads) {
  static std::map<int, double> cache;
  if (auto it = cache.find(threads); it != cache.end()) return it->second;
  StepBench bench(StepTier::kInMemory, StepParams(), threads);
  bench.Step();
  std::vector<double> times;
  for (int i = 0; i < 9; ++i) times.push_back(bench.Step());
  return cache[threads] = Median(times);
}

// The disk's bandwidth for the floor: the better of raw O_DIRECT at queue depth 1 and the
// store's own best (1 MiB requests, queue depth 8), each measured once in this run.
double DiskBandwidth(bool write) {
  static const std::pair<double, double> read_write = [] {
    NvmeStoreOptions options;
    options.dir = Config().dir;
    options.name = "bench-floor";
    options.queue_depth = 8;
    auto store = NvmeStore::Create(options, Config().bytes);
    ZS_CHECK(store.ok(), "{}", store.status().ToString());
    double best[2] = {RawBandwidth(false), RawBandwidth(true)};
    for (int pass = 0; pass < 3; ++pass) {
      for (bool w : {true, false}) {
        const auto t0 = std::chrono::steady_clock::now();
        Status s = w ? (*store)->Write(0, Buffer(true), Config().bytes)
                     : (*store)->Read(0, Buffer(false), Config().bytes);
        ZS_CHECK(s.ok(), "{}", s.ToString());
        const double sec =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best[w] = std::max(best[w], double(Config().bytes) / sec);
      }
    }
    return std::make_pair(best[0], best[1]);
  }();
  return write ? read_write.second : read_write.first;
}

// Args: tier (StepTier), optimizer threads. Times are medians over the iterations.
void BM_OptimizerStep(benchmark::State& state) {
  const auto tier = StepTier(state.range(0));
  const int threads = int(state.range(1));
  const char* names[] = {"in memory", "cpu offload (stage 1: gradients copied)",
                         "cpu offload (stages 2/3: gradients on host)", "nvme offload"};
  state.SetLabel(names[int(tier)]);
  const double in_memory = InMemoryStepSeconds(threads);
  const double disk_read = DiskBandwidth(false), disk_write = DiskBandwidth(true);
  StepBench bench(tier, StepParams(), threads);
  bench.Step();  // warm-up: the first pass records the store's trace
  const ShardStoreStats before = bench.store().stats();
  std::vector<double> times;
  for (auto _ : state) times.push_back(bench.Step());
  const double per_step = Median(times);
  state.SetItemsProcessed(state.iterations() * StepParams());
  state.counters["step_ms"] = per_step * 1e3;
  state.counters["vs_in_memory"] = per_step / in_memory;
  if (tier == StepTier::kNvme) {
    const ShardStoreStats& after = bench.store().stats();
    const double iters = double(state.iterations());
    const double floor = double(after.bytes_read - before.bytes_read) / iters / disk_read +
                         double(after.bytes_written - before.bytes_written) / iters / disk_write;
    state.counters["disk_floor_ms"] = floor * 1e3;
    state.counters["vs_goal"] = per_step / std::max(in_memory, floor);
    state.counters["disk_fraction"] = floor / per_step;
  }
}
BENCHMARK(BM_OptimizerStep)
    ->ArgNames({"tier", "threads"})
    ->ArgsProduct({{0, 1, 2, 3}, {1, 2}})
    ->MinTime(1.0)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---- the checksum -----------------------------------------------------------------------------

// Arg: bytes hashed per iteration: 1 MiB stays in cache (a piece just moved by the disk), 64 MiB
// comes from DRAM (a buffer written long before its write starts).
void BM_PageChecksum(benchmark::State& state) {
  const int64_t bytes = std::min(state.range(0), Config().bytes);
  const unsigned char* data = Buffer(true);
  for (auto _ : state) {
    uint64_t sum = 0;
    for (int64_t at = 0; at < bytes; at += kChecksumPageBytes) {
      sum += PageChecksum(data + at, static_cast<uint64_t>(at));
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_PageChecksum)->Arg(kMiB)->Arg(64 * kMiB)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace zs

// BENCHMARK_MAIN with a shorter default --benchmark_min_time: each iteration moves
// ZS_BENCH_OFFLOAD_BYTES through the disk, and the library's 0.5 s default puts the whole program
// near 60 s. A --benchmark_min_time on the command line still wins.
int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  char default_min_time[] = "--benchmark_min_time=0.2";
  const bool given = std::any_of(args.begin(), args.end(), [](const char* a) {
    return std::string_view(a).starts_with("--benchmark_min_time");
  });
  if (!given) args.insert(args.begin() + 1, default_min_time);
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
