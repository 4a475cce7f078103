// Per-target half of floor_kernel.h (Highway foreach_target).
#include "bench/floor_kernel.h"

#include <cstddef>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/floor_kernel.cc"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace zs {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// Adds 1 to the `count` elements (one vector of u16 lanes) of type T at x.
template <typename T>
HWY_INLINE void AddOneVector(T* x, size_t count) {
  if constexpr (sizeof(T) == 4) {
    const hn::ScalableTag<float> df;
    for (size_t j = 0; j < count; j += hn::Lanes(df)) {
      hn::StoreU(hn::Add(hn::LoadU(df, x + j), hn::Set(df, 1.0f)), df, x + j);
    }
  } else if constexpr (sizeof(T) == 2) {
    const hn::ScalableTag<uint16_t> d;
    hn::StoreU(hn::Add(hn::LoadU(d, x), hn::Set(d, uint16_t{1})), d, x);
  } else {
    const hn::Rebind<int8_t, hn::ScalableTag<uint16_t>> d;  // as many lanes
    hn::StoreU(hn::Add(hn::LoadU(d, x), hn::Set(d, int8_t{1})), d, x);
  }
}

template <typename S>
void Tile(float* w, const uint16_t* g, uint16_t* p, S* m0, S* m1, bool stream, int64_t b,
          int64_t e) {
  auto one = [&](int64_t i) {
    w[i] += 1.0f;
    p[i] = uint16_t(g[i] + 1);
    if (m0 != nullptr) m0[i] = S(m0[i] + S(1));
    if (m1 != nullptr) m1[i] = S(m1[i] + S(1));
  };
  const hn::ScalableTag<uint16_t> d16;
  const size_t lanes = hn::Lanes(d16);
  const int64_t step = int64_t(lanes);
  int64_t i = b;
  if (stream) {
    for (; i < e && reinterpret_cast<uintptr_t>(p + i) % (lanes * 2) != 0; ++i) one(i);
  }
  for (; i + step <= e; i += step) {
    AddOneVector(w + i, lanes);
    const auto out = hn::Add(hn::LoadU(d16, g + i), hn::Set(d16, uint16_t{1}));
    if (stream) {
      hn::Stream(out, d16, p + i);
    } else {
      hn::StoreU(out, d16, p + i);
    }
    if (m0 != nullptr) AddOneVector(m0 + i, lanes);
    if (m1 != nullptr) AddOneVector(m1 + i, lanes);
  }
  for (; i < e; ++i) one(i);
  if (stream) hwy::FlushStream();
}

}  // namespace

void FloorTileImpl(float* w, const uint16_t* g, uint16_t* p, void* m0, void* m1,
                   StateDType state_dtype, bool stream, int64_t b, int64_t e) {
  switch (state_dtype) {
    case StateDType::kF32:
      return Tile(w, g, p, static_cast<float*>(m0), static_cast<float*>(m1), stream, b, e);
    case StateDType::kBF16:
      return Tile(w, g, p, static_cast<uint16_t*>(m0), static_cast<uint16_t*>(m1), stream, b, e);
    case StateDType::kInt8:
      return Tile(w, g, p, static_cast<int8_t*>(m0), static_cast<int8_t*>(m1), stream, b, e);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace zs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zs {

HWY_EXPORT(FloorTileImpl);

void FloorTile(float* master, const uint16_t* grad, uint16_t* param_out, void* state0, void* state1,
               StateDType state_dtype, bool stream_param_out, int64_t b, int64_t e) {
  HWY_DYNAMIC_DISPATCH(FloorTileImpl)
  (master, grad, param_out, state0, state1, state_dtype, stream_param_out, b, e);
}

}  // namespace zs
#endif  // HWY_ONCE
