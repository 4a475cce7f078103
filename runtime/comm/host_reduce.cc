#include "runtime/comm/host_reduce.h"

#include <algorithm>
#include <cstring>

#include "runtime/base/check.h"

namespace zs {
namespace {

constexpr size_t kTile = 1024;  // 4 KiB of f32 accumulators: stays in L1

inline void LoadTile(float* acc, const void* src, DType dtype, size_t begin, size_t n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(acc, static_cast<const float*>(src) + begin, n * sizeof(float));
      return;
    case DType::kBF16: {
      const BFloat16* s = static_cast<const BFloat16*>(src) + begin;
      for (size_t i = 0; i < n; ++i) acc[i] = BF16ToFloat(s[i]);
      return;
    }
    case DType::kF16: {
      const Float16* s = static_cast<const Float16*>(src) + begin;
      for (size_t i = 0; i < n; ++i) acc[i] = F16ToFloat(s[i]);
      return;
    }
  }
}

inline void CombineTile(float* __restrict acc, const float* __restrict x, size_t n, ReduceOp op) {
  if (op == ReduceOp::kMax) {
    for (size_t i = 0; i < n; ++i) {
      const float a = acc[i], b = x[i];
      acc[i] = (a != a || a > b) ? a : b;  // NaN in either input wins
    }
  } else {
    for (size_t i = 0; i < n; ++i) acc[i] += x[i];
  }
}

inline void CombineF32(float* __restrict acc, const float* __restrict x, size_t n, ReduceOp op) {
  CombineTile(acc, x, n, op);
}

}  // namespace

// The loops above vectorize at -O3 (see CMakeLists.txt); target_clones compiles this function
// once per ISA and picks the widest the CPU has at load time (ifunc), so one binary runs
// everywhere and still uses AVX-512 where it exists. Results are identical across clones:
// every lane does the same IEEE f32 additions in the same order. Not under sanitizers: the
// ifunc resolver runs during relocation, before the TSan runtime is up, and crashes the program.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define ZS_REDUCE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ZS_REDUCE_CLONES
#endif

ZS_REDUCE_CLONES
static void ReduceTiles(void* dst, const void* const* sources, int n, size_t count, DType dtype,
                        ReduceOp op, int world) {
  alignas(64) float acc[kTile];
  alignas(64) float tmp[kTile];
  const float scale_divisor = float(world);
  for (size_t begin = 0; begin < count; begin += kTile) {
    const size_t len = std::min(kTile, count - begin);
    LoadTile(acc, sources[0], dtype, begin, len);
    for (int k = 1; k < n; ++k) {
      if (dtype == DType::kF32) {
        CombineF32(acc, static_cast<const float*>(sources[k]) + begin, len, op);
      } else {
        LoadTile(tmp, sources[k], dtype, begin, len);
        CombineTile(acc, tmp, len, op);
      }
    }
    if (op == ReduceOp::kAvg) {
      for (size_t i = 0; i < len; ++i) acc[i] /= scale_divisor;
    }
    switch (dtype) {
      case DType::kF32:
        std::memcpy(static_cast<float*>(dst) + begin, acc, len * sizeof(float));
        break;
      case DType::kBF16: {
        BFloat16* d = static_cast<BFloat16*>(dst) + begin;
        for (size_t i = 0; i < len; ++i) d[i] = FloatToBF16(acc[i]);
        break;
      }
      case DType::kF16: {
        Float16* d = static_cast<Float16*>(dst) + begin;
        for (size_t i = 0; i < len; ++i) d[i] = FloatToF16(acc[i]);
        break;
      }
    }
  }
}

void ReduceSources(void* dst, const void* const* sources, int n, size_t count, DType dtype,
                   ReduceOp op, int world) {
  ZS_CHECK(n >= 1, "ReduceSources needs at least one source, got {}", n);
  ReduceTiles(dst, sources, n, count, dtype, op, world);
}

}  // namespace zs
