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
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "offload/block_checksum.h"
#include "offload/nvme_store.h"
#include "runtime/base/env.h"
#include "runtime/base/splitmix64.h"

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
  for (auto _ : state) {
    Status s =
        write ? (*store)->Write(0, Buffer(true), bytes) : (*store)->Read(0, Buffer(false), bytes);
    if (!s.ok()) return state.SkipWithError(s.ToString().c_str());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
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
