#include "optimizers/cpu_optimizer.h"

#include <unistd.h>  // sysconf: cache sizes

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>  // __get_cpuid: the CPU vendor (kAutoPrefetch)
#endif

#include "optimizers/optimizer_kernels.h"
#include "optimizers/state_codec.h"
#include "runtime/base/check.h"

namespace zs {

namespace {

// The most int8 elements stepped through fp32 scratch at a time: blocks that straddle a
// weight-decay segment boundary are decoded into it, updated and encoded back, and 2 states x
// 8 KiB of scratch stay in L1 (a whole tile's scratch, 128 KiB, did not, and the passes over it
// ran at L2 speed). The other blocks run the fused kernel ([Note: fused int8 states]).
constexpr int64_t kScratchElements = 2048;

}  // namespace

static_assert(CpuOptimizer::kMinTileElements % kQuantBlock == 0 &&
                  kScratchElements % kQuantBlock == 0,
              "tiles and scratch runs must start on int8 block boundaries");
static_assert(std::has_single_bit(uint64_t(CpuOptimizer::kMinTileElements)) &&
                  (int64_t{1} << 32) % CpuOptimizer::kMaxTileElements == 0,
              "power-of-two tiles from kMinTileElements to kMaxTileElements divide 2^32");

// A persistent pool: `threads - 1` workers plus the calling thread claim tiles from one atomic
// counter. Tile boundaries are fixed, so which thread runs a tile never changes its result.
class CpuOptimizer::Pool {
 public:
  // fn(tile, participant): participant in [0, threads) picks the caller's scratch.
  using TileFn = std::function<void(int64_t tile, int participant)>;

  explicit Pool(int threads) : threads_(std::max(threads, 1)) {
    scratch_.resize(threads_);
    workers_.reserve(threads_ - 1);
    for (int p = 1; p < threads_; ++p) workers_.emplace_back([this, p] { WorkerLoop(p); });
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  int threads() const { return threads_; }

  // Scratch for int8 states: 2 * kScratchElements floats per participant.
  float* Scratch(int participant) {
    std::vector<float>& s = scratch_[participant];
    if (s.empty()) s.resize(2 * kScratchElements);
    return s.data();
  }

  // Runs fn on every tile in [0, num_tiles); returns when all are done.
  void Run(int64_t num_tiles, const TileFn& fn) {
    if (workers_.empty() || num_tiles <= 1) {
      for (int64_t t = 0; t < num_tiles; ++t) fn(t, 0);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      num_tiles_ = num_tiles;
      next_tile_.store(0, std::memory_order_relaxed);
      busy_workers_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    ClaimTiles(fn, num_tiles, 0);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return busy_workers_ == 0; });
    fn_ = nullptr;
  }

 private:
  void ClaimTiles(const TileFn& fn, int64_t num_tiles, int participant) {
    for (;;) {
      const int64_t t = next_tile_.fetch_add(1, std::memory_order_relaxed);
      if (t >= num_tiles) return;
      fn(t, participant);
    }
  }

  void WorkerLoop(int participant) {
    uint64_t seen = 0;
    for (;;) {
      const TileFn* fn;
      int64_t num_tiles;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        fn = fn_;
        num_tiles = num_tiles_;
      }
      ClaimTiles(*fn, num_tiles, participant);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (--busy_workers_ == 0) done_.notify_one();
      }
    }
  }

  const int threads_;
  std::vector<std::thread> workers_;
  std::vector<std::vector<float>> scratch_;  // one per participant; each used by its owner only
  std::atomic<int64_t> next_tile_{0};
  std::mutex mu_;
  std::condition_variable wake_;  // workers: a new generation or stop
  std::condition_variable done_;  // caller: busy_workers_ reached 0
  // Guarded by mu_:
  const TileFn* fn_ = nullptr;
  int64_t num_tiles_ = 0;
  int busy_workers_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

namespace {

// `tile_elements` when it is a valid tile size; a ZS_CHECK failure otherwise.
int64_t CheckedTileElements(int64_t tile_elements) {
  ZS_CHECK(tile_elements >= CpuOptimizer::kMinTileElements &&
               tile_elements <= CpuOptimizer::kMaxTileElements &&
               std::has_single_bit(uint64_t(tile_elements)),
           "tile_elements = {}: expected a power of two from {} to {}", tile_elements,
           CpuOptimizer::kMinTileElements, CpuOptimizer::kMaxTileElements);
  return tile_elements;
}

}  // namespace

// The tile size is checked before the pool starts its threads.
CpuOptimizer::CpuOptimizer(int threads, int64_t tile_elements)
    : tile_elements_(CheckedTileElements(tile_elements)), pool_(std::make_unique<Pool>(threads)) {}

int64_t CpuOptimizer::TileFor(int64_t n, int threads, int64_t tile_elements) {
  int64_t tile = tile_elements;
  while (tile > kMinTileElements && (n + tile - 1) / tile < threads) tile /= 2;
  return tile;
}
CpuOptimizer::~CpuOptimizer() = default;

int CpuOptimizer::threads() const { return pool_->threads(); }

std::string CpuOptimizer::SimdTarget() { return internal::OptimizerKernelTarget(); }

int64_t CpuOptimizer::StepWorkingSetBytes(const OptimizerHyper& hyper, const ShardStep& shard) {
  const int64_t n = shard.n;
  int64_t bytes = n * int64_t(sizeof(float)) + n * int64_t(DTypeSize(shard.grad_dtype));
  if (shard.param_out != nullptr) bytes += n * int64_t(DTypeSize(shard.param_dtype));
  const int num_states = NumStates(hyper.kind, hyper.beta1);
  return bytes + num_states * StateBytes(shard.state_dtype, n);
}

namespace {

// The size of cpu0's highest-level data or unified cache as Linux's sysfs describes it
// ("32768K"), or 0. Preferred to sysconf, which in virtual machines can report the host's whole
// L3 (320 MiB on a 2-vCPU VM whose sysfs, like lscpu, says 32 MiB).
int64_t SysfsLastLevelCacheBytes() {
  int best_level = 0;
  int64_t best_bytes = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream level_file(dir + "/level"), type_file(dir + "/type"), size_file(dir + "/size");
    int level = 0;
    std::string type, size;
    if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) break;
    if (type == "Instruction" || level <= best_level || size.empty()) continue;
    int64_t value = 0;
    size_t digits = 0;
    while (digits < size.size() && std::isdigit(static_cast<unsigned char>(size[digits]))) {
      value = value * 10 + (size[digits++] - '0');
    }
    const char unit = digits < size.size() ? size[digits] : ' ';
    const int shift = unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0;
    best_level = level;
    best_bytes = value << shift;
  }
  return best_bytes;
}

}  // namespace

int64_t CpuOptimizer::LastLevelCacheBytes() {
  static const int64_t bytes = [] {
    if (const int64_t b = SysfsLastLevelCacheBytes(); b > 0) return b;
    for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
      if (const long b = sysconf(name); b > 0) return int64_t(b);
    }
    return int64_t{32} << 20;
  }();
  return bytes;
}

int64_t CpuOptimizer::CacheResidentLimitBytes() {
  return LastLevelCacheBytes() / kCacheResidentDivisor;
}

int64_t CpuOptimizer::CacheResidentLimitBytes(const ShardStep& shard) {
  return shard.cache_resident_bytes >= 0 ? shard.cache_resident_bytes : CacheResidentLimitBytes();
}

namespace {

#if defined(__x86_64__) || defined(__i386__)
bool CpuVendorIsIntel() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
  char vendor[13] = {};  // CPUID leaf 0: the vendor string in ebx, edx, ecx
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::strcmp(vendor, "GenuineIntel") == 0;
}
#else
bool CpuVendorIsIntel() { return false; }
#endif

}  // namespace

bool CpuOptimizer::AutoPrefetchesOnThisCpu() {
  static const bool intel = CpuVendorIsIntel();
  return intel;
}

int64_t CpuOptimizer::PrefetchElements(const ShardStep& shard) {
  if (shard.prefetch_elements != kAutoPrefetch) return shard.prefetch_elements;
  return AutoPrefetchesOnThisCpu() ? kDefaultPrefetchElements : 0;
}

bool CpuOptimizer::StreamsParamOut(const OptimizerHyper& hyper, const ShardStep& shard) {
  if (shard.param_out == nullptr) return false;
  switch (shard.param_out_stores) {
    case ParamOutStores::kCached:
      return false;
    case ParamOutStores::kStreaming:
      return true;
    case ParamOutStores::kAuto:
      return StepWorkingSetBytes(hyper, shard) > CacheResidentLimitBytes(shard);
  }
  return false;
}

namespace {

void CheckShard(const OptimizerHyper& h, const ShardStep& s, int num_states) {
  ZS_CHECK(s.n >= 0, "shard has n = {}", s.n);
  ZS_CHECK(s.prefetch_elements >= kAutoPrefetch &&
               s.prefetch_elements <= CpuOptimizer::kMaxPrefetchElements,
           "prefetch_elements = {}: expected {} (auto), 0 (none) or up to {} elements ahead",
           s.prefetch_elements, kAutoPrefetch, CpuOptimizer::kMaxPrefetchElements);
  ZS_CHECK(s.cache_resident_bytes >= kAutoCacheResident,
           "cache_resident_bytes = {}: expected {} (auto) or a size in bytes",
           s.cache_resident_bytes, kAutoCacheResident);
  ZS_CHECK(h.step >= 1, "optimizer step {} (counted from 1)", h.step);
  ZS_CHECK(s.index_base >= 0, "index_base {}: expected >= 0", s.index_base);
  if (s.n == 0) return;
  ZS_CHECK(s.master != nullptr && s.grad != nullptr, "shard of {} elements without master/grad",
           s.n);
  for (int k = 0; k < num_states; ++k) {
    ZS_CHECK(s.state[k] != nullptr, "{} needs state {} (shard of {} elements)",
             OptimizerKindName(h.kind), k, s.n);
    ZS_CHECK(s.state_dtype != StateDType::kInt8 || s.state_scale[k] != nullptr,
             "int8 state {} without scales", k);
  }
  ZS_CHECK(!s.segments.empty(), "no weight-decay segments for a shard of {} elements", s.n);
  int64_t expected = 0;
  for (const ShardSegment& seg : s.segments) {
    ZS_CHECK(seg.begin == expected && seg.end >= seg.begin,
             "weight-decay segment [{}, {}) does not follow [.., {})", seg.begin, seg.end,
             expected);
    expected = seg.end;
  }
  ZS_CHECK(expected == s.n, "weight-decay segments end at {}, shard has {} elements", expected,
           s.n);
  const int64_t groups = std::max<int64_t>(1, int64_t(s.groups.size()));
  for (const ShardSegment& seg : s.segments) {
    ZS_CHECK(seg.group >= 0 && seg.group < groups,
             "segment [{}, {}) names parameter group {}, the shard has {}", seg.begin, seg.end,
             seg.group, groups);
  }
  // [Note: parameter groups] SGD's state exists for all groups or none.
  for (size_t g = 0; g < s.groups.size(); ++g) {
    ZS_CHECK(h.kind != OptimizerKind::kSgd || (s.groups[g].beta1 != 0.0f) == (h.beta1 != 0.0f),
             "SGD group {} has momentum {} but the step's momentum is {}: a momentum buffer "
             "exists for every group or for none",
             g, s.groups[g].beta1, h.beta1);
  }
}

}  // namespace

void CpuOptimizer::Step(const OptimizerHyper& hyper, const ShardStep& shard) {
  const int num_states = NumStates(hyper.kind, hyper.beta1);
  CheckShard(hyper, shard, num_states);
  scratch_elements_.store(0, std::memory_order_relaxed);
  if (shard.n == 0) return;
  // One set of constants per parameter group ([Note: parameter groups]).
  std::vector<internal::KernelConstants> consts;
  if (shard.groups.empty()) {
    consts.push_back(internal::MakeKernelConstants(hyper));
  } else {
    for (const GroupHyper& g : shard.groups) {
      consts.push_back(internal::MakeKernelConstants(WithGroup(hyper, g)));
    }
  }
  const size_t grad_size = DTypeSize(shard.grad_dtype);
  const size_t out_size = DTypeSize(shard.param_dtype);
  const std::span<const ShardSegment> segments = shard.segments;
  const bool stream_param_out = StreamsParamOut(hyper, shard);
  const auto prefetch_elements = static_cast<uint32_t>(PrefetchElements(shard));

  // fp32 states are updated in place, bf16 states in registers ([Note: fused bf16 states] in
  // optimizer_kernels.cc) and int8 states block by block ([Note: fused int8 states]): a tile in
  // one call of the kernel per weight-decay segment. The fused int8 kernel takes one weight decay
  // per range and ranges that start on block boundaries, so an int8 block that straddles a
  // segment boundary (and the straddling blocks after it, up to kScratchElements) is decoded
  // into per-thread fp32 scratch instead, updated there piece by piece and encoded back.
  // A kind without states steps alike whatever the state type.
  const StateDType state_dtype = num_states == 0 ? StateDType::kF32 : shard.state_dtype;
  const bool int8_states = state_dtype == StateDType::kInt8;
  const int64_t tile_elements = StepTileElements(shard.n);

  // The states of a run of elements [begin, ...): where element `begin` of each state is.
  struct RunStates {
    StateDType dtype = StateDType::kF32;
    void* state[2] = {nullptr, nullptr};
    float* scale[2] = {nullptr, nullptr};  // int8 codes
    bool as_root = false;                  // int8 scratch ([Note: int8 second moments])
  };

  // The first segment that ends after `pos` (it holds element pos).
  auto segment_of = [&](int64_t pos) {
    return std::upper_bound(segments.begin(), segments.end(), pos,
                            [](int64_t p, const ShardSegment& s) { return p < s.end; });
  };

  // Runs the kernel over [begin, end), split at segment boundaries.
  auto run_pieces = [&](int64_t begin, int64_t end, const RunStates& states) {
    const size_t state_size = StateCodeBytes(states.dtype);
    auto seg = segment_of(begin);
    for (int64_t pos = begin; pos < end;) {
      int64_t piece_end = std::min(end, seg->end);
      if (piece_end <= pos) {  // empty segment
        ++seg;
        continue;
      }
      if (states.dtype == StateDType::kBF16) {
        // A kernel range keys its rounding by the high half of the stream index, so it never
        // crosses a multiple of 2^32 (with index_base 0, tile_elements divides 2^32 and no
        // tile does; a shard stepped in pieces may start anywhere).
        const int64_t index = shard.index_base + pos;
        piece_end = std::min(piece_end, ((index >> 32) + 1) * (int64_t{1} << 32) - shard.index_base);
      }
      const size_t skip = static_cast<size_t>(pos - begin);
      ZS_DCHECK(states.dtype != StateDType::kInt8 || (skip == 0 && piece_end == end),
                "an int8 run [{}, {}) crosses a weight-decay segment boundary at {}", begin, end,
                piece_end);
      internal::KernelRange r;
      r.n = piece_end - pos;
      r.master = shard.master + pos;
      r.state_dtype = states.dtype;
      r.state0 = states.state[0] != nullptr
                     ? static_cast<uint8_t*>(states.state[0]) + skip * state_size
                     : nullptr;
      r.state1 = states.state[1] != nullptr
                     ? static_cast<uint8_t*>(states.state[1]) + skip * state_size
                     : nullptr;
      r.scale0 = states.scale[0];  // int8 runs are never split (one segment)
      r.scale1 = states.scale[1];
      r.second_moment_as_root = states.as_root;
      if (states.dtype == StateDType::kBF16) {
        const int64_t index = shard.index_base + pos;
        r.index_lo = static_cast<uint32_t>(index);
        r.sr_key = sr::MakeSrKey(shard.seed, hyper.step, static_cast<uint32_t>(index >> 32));
      }
      r.grad = static_cast<const uint8_t*>(shard.grad) + pos * grad_size;
      r.grad_dtype = shard.grad_dtype;
      r.grad_scale = shard.grad_scale;
      r.param_out = shard.param_out != nullptr
                        ? static_cast<uint8_t*>(shard.param_out) + pos * out_size
                        : nullptr;
      r.param_dtype = shard.param_dtype;
      r.stream_param_out = stream_param_out;
      r.prefetch_elements = prefetch_elements;
      r.weight_decay = seg->weight_decay;
      internal::RunOptimizerKernel(consts[size_t(seg->group)], r);
      pos = piece_end;
      if (pos == seg->end) ++seg;
    }
  };

  // True when [begin, end) lies in one weight-decay segment.
  auto in_one_segment = [&](int64_t begin, int64_t end) { return segment_of(begin)->end >= end; };

  // The states of element `begin` as stored ([Note: state layout]: int8 codes and scales are
  // addressed from a block's first element).
  auto stored_states = [&](int64_t begin) {
    RunStates states;
    states.dtype = state_dtype;
    for (int k = 0; k < num_states; ++k) {
      states.state[k] = static_cast<uint8_t*>(shard.state[k]) + begin * StateCodeBytes(state_dtype);
      if (int8_states) states.scale[k] = shard.state_scale[k] + begin / kQuantBlock;
    }
    return states;
  };

  // int8 states over [begin, end) (whole blocks, but the shard's last) through fp32 scratch.
  auto run_through_scratch = [&](int64_t begin, int64_t end, int participant) {
    const RunStates states = stored_states(begin);
    // Root states stay roots in the scratch: the kernel squares and takes the root itself.
    RunStates scratch;
    scratch.as_root = true;
    const int64_t len = end - begin;
    for (int k = 0; k < num_states; ++k) {
      scratch.state[k] = pool_->Scratch(participant) + k * kScratchElements;
      DecodeState(StateDType::kInt8, states.state[k], states.scale[k], begin, len,
                  static_cast<float*>(scratch.state[k]));
    }
    run_pieces(begin, end, scratch);
    scratch_elements_.fetch_add(len, std::memory_order_relaxed);
    for (int k = 0; k < num_states; ++k) {
      EncodeState(StateDType::kInt8, static_cast<const float*>(scratch.state[k]), begin, len,
                  states.state[k], states.scale[k], shard.seed, hyper.step, k);
    }
  };

  auto run_tile = [&](int64_t tile, int participant) {
    const int64_t tile_begin = tile * tile_elements;
    const int64_t tile_end = std::min(shard.n, tile_begin + tile_elements);
    if (!int8_states) {
      run_pieces(tile_begin, tile_end, stored_states(tile_begin));
      return;
    }
    for (int64_t begin = tile_begin; begin < tile_end;) {
      // The whole blocks from `begin` that lie in its segment go to the fused kernel in one run.
      const int64_t segment_end = segment_of(begin)->end;
      int64_t end = segment_end >= tile_end ? tile_end : segment_end / kQuantBlock * kQuantBlock;
      if (end > begin) {
        run_pieces(begin, end, stored_states(begin));
        begin = end;
        continue;
      }
      // The block at `begin` straddles a segment boundary: it and the straddling blocks after
      // it (a run of small tensors) go through the scratch.
      auto block_end = [&](int64_t b) { return std::min(tile_end, b + kQuantBlock); };
      end = block_end(begin);
      while (end < tile_end && end - begin < kScratchElements &&
             !in_one_segment(end, block_end(end))) {
        end = block_end(end);
      }
      run_through_scratch(begin, end, participant);
      begin = end;
    }
  };
  const int64_t num_tiles = (shard.n + tile_elements - 1) / tile_elements;
  pool_->Run(num_tiles, run_tile);
}

}  // namespace zs
