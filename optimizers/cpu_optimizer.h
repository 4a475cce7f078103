// CpuOptimizer: one optimizer step over a shard on the CPU at memory speed: Highway SIMD
// (runtime dispatch: AVX-512, AVX2, SSE4, scalar; NEON on Arm) and a few threads.
//
// Contract
// - Step(hyper, shard) applies one update (optimizer_spec.h gives the rules, the state layout,
//   the weight-decay segments and the parameter groups, each segment stepping with its group's
//   lr, betas and eps) to shard elements [0, shard.n), reading the gradient in its
//   stored dtype and writing the low-precision parameter copy in the same pass when
//   shard.param_out is set.
// - Work is cut into tiles of tile_elements() (kDefaultTileElements unless the constructor is
//   given another power of two from kMinTileElements to kMaxTileElements; smaller, down to
//   kMinTileElements, when a shard has fewer than threads() tiles of that size, so that every
//   thread gets work: StepTileElements) handed to the pool's threads; [Note: bit-identical
//   splits] in optimizer_spec.h makes the result independent of the thread count and of the
//   tiling. Step blocks the calling thread until every tile is done.
//   Larger tiles start fewer loops (each start has its cost: the hardware prefetchers pick up
//   each array's stream anew); smaller ones balance small shards over more threads.
// - fp32 states are updated in place; bf16 states are widened, updated and stochastically
//   rounded in registers ([Note: fused bf16 states] in optimizer_kernels.cc); int8 states are
//   decoded in the kernel's loads, updated into a one-block fp32 buffer in L1 and encoded from
//   it (per-block symmetric scale; second moments kept as their roots, which the kernel squares
//   and takes again: [Note: fused int8 states]), one kernel run per weight-decay segment of a
//   tile. An int8 block that straddles a segment boundary (and the straddling blocks after it,
//   up to 2048 elements) goes through per-thread fp32 scratch instead (decode, update piece by
//   piece, encode), with the same result. Each state byte in memory is read and written once.
// - param_out: written through ordinary or non-temporal stores as shard.param_out_stores says
//   ([Note: streaming param_out] in optimizer_spec.h; StreamsParamOut resolves kAuto). The bits
//   are the same; streamed stores are fenced before Step returns.
// - Software prefetch: the input lines of the element shard.prefetch_elements ahead of each
//   kernel loop are prefetched ([Note: software prefetch] in optimizer_spec.h; PrefetchElements
//   resolves kAutoPrefetch). The bits are the same whatever the distance.
// - Threads: `threads` threads run the tiles: threads - 1 workers created at construction plus
//   the caller (0 or 1 = the caller alone). One Step at a time per object; different objects
//   are independent.
// - Errors: none at run time; invalid shards (null master, missing states for the kind,
//   prefetch_elements outside [kAutoPrefetch, kMaxPrefetchElements], cache_resident_bytes
//   below kAutoCacheResident, a tile size that is not
//   a power of two in [kMinTileElements, kMaxTileElements] at construction,
//   segments not covering [0, n), a segment's group out of range, SGD groups that disagree on
//   having momentum) are programmer bugs caught by ZS_CHECK.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "optimizers/optimizer_spec.h"

namespace zs {

class CpuOptimizer {
 public:
  // 64K elements (1.75 MiB moved by an AdamW step with fp32 states): 3-5% faster steps at 200M
  // parameters than 16K on the Intel host of docs/PERFORMANCE.md ("Session of 2026-12-06"),
  // the same at 1M; smaller shards get smaller tiles (StepTileElements).
  static constexpr int64_t kDefaultTileElements = 64 * 1024;
  // Tiles start on int8 blocks and never straddle a 2^32 boundary of shard indices (bf16
  // states' rounding key changes there): powers of two in this range.
  static constexpr int64_t kMinTileElements = 2048;
  static constexpr int64_t kMaxTileElements = int64_t{1} << 30;
  // kAutoPrefetch's distance where it prefetches: on the Intel host of [Note: software
  // prefetch], 128 to 768 elements ahead all closed most of the gap, 256 best.
  static constexpr int64_t kDefaultPrefetchElements = 256;
  // The largest ShardStep::prefetch_elements accepted.
  static constexpr int64_t kMaxPrefetchElements = int64_t{1} << 20;

  // `tile_elements`: a power of two in [kMinTileElements, kMaxTileElements] (ZS_CHECK).
  explicit CpuOptimizer(int threads = 1, int64_t tile_elements = kDefaultTileElements);
  ~CpuOptimizer();
  CpuOptimizer(const CpuOptimizer&) = delete;
  CpuOptimizer& operator=(const CpuOptimizer&) = delete;

  void Step(const OptimizerHyper& hyper, const ShardStep& shard);

  int threads() const;
  int64_t tile_elements() const { return tile_elements_; }
  // int8 state elements the last Step ran through fp32 scratch (blocks that straddle a
  // weight-decay segment boundary: [Note: fused int8 states]); the others ran the fused kernel.
  int64_t last_step_scratch_elements() const {
    return scratch_elements_.load(std::memory_order_relaxed);
  }
  // The tile a Step over n elements uses: tile_elements(), halved while the shard would give
  // fewer tiles than threads() (never below kMinTileElements). Results do not depend on it.
  int64_t StepTileElements(int64_t n) const { return TileFor(n, threads(), tile_elements_); }
  // The same rule for any thread count and largest tile (the benchmark's floor walks these).
  static int64_t TileFor(int64_t n, int threads, int64_t tile_elements);

  // The bytes of every array one Step over `shard` reads or writes, each counted once.
  static int64_t StepWorkingSetBytes(const OptimizerHyper& hyper, const ShardStep& shard);
  // Whether Step writes shard.param_out through non-temporal stores: kStreaming, or kAuto with
  // StepWorkingSetBytes above CacheResidentLimitBytes(shard). False without param_out.
  static bool StreamsParamOut(const OptimizerHyper& hyper, const ShardStep& shard);
  // How many elements ahead Step prefetches its inputs: shard.prefetch_elements when it is set
  // (>= 0); for kAutoPrefetch, kDefaultPrefetchElements on Intel x86 CPUs whatever the size
  // (free where the arrays are cached: [Note: software prefetch]), else 0.
  static int64_t PrefetchElements(const ShardStep& shard);
  // Whether kAutoPrefetch prefetches on this CPU: true on Intel x86 CPUs (CPUID vendor
  // "GenuineIntel").
  static bool AutoPrefetchesOnThisCpu();
  // cpu0's highest-level cache in Linux's sysfs, else the L3 (or L2) size sysconf reports, else
  // 32 MiB.
  static int64_t LastLevelCacheBytes();
  // The largest step working set ParamOutStores::kAuto treats as cache-resident:
  // LastLevelCacheBytes() / kCacheResidentDivisor ([Note: streaming param_out]); the second
  // form takes shard.cache_resident_bytes instead where it is set (>= 0).
  static int64_t CacheResidentLimitBytes();
  static int64_t CacheResidentLimitBytes(const ShardStep& shard);
  // A quarter, as glibc's memcpy picks non-temporal stores beyond a quarter of the L3: the
  // last-level cache is shared (other cores, other tenants of a VM) and a training step's
  // forward and backward passes run through it between two optimizer steps. On the Intel VM of
  // docs/PERFORMANCE.md ("Session of 2026-12-06 (second)", sysfs L3 480 MiB), steps whose
  // working set passed about 100 MiB already fell toward DRAM speed.
  static constexpr int64_t kCacheResidentDivisor = 4;
  // The SIMD target chosen at run time ("AVX3", "AVX2", "SSE4", "EMU128"/"SCALAR", "NEON").
  static std::string SimdTarget();

 private:
  class Pool;
  int64_t tile_elements_;
  std::unique_ptr<Pool> pool_;
  std::atomic<int64_t> scratch_elements_{0};  // last_step_scratch_elements()
};

}  // namespace zs
