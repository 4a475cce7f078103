// The per-target half of softmax_kernels.h: Highway compiles this file once per SIMD target
// (foreach_target.h); the exported functions pick the best one at run time.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_AVX3_DL)  // as optimizers/optimizer_kernels.cc
#endif

#include "runtime/nn/softmax_kernels.h"

#include <algorithm>
#include <cstddef>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/nn/softmax_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace zs::nn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Room for any target's vector (SVE's lane count is known only at run time).
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// A partial last vector: its lanes copied into a full vector whose other lanes hold `pad`.
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const float* x, size_t count, float pad) {
  HWY_ALIGN float buf[kMaxLanes];
  std::fill(buf, buf + hn::Lanes(d), pad);
  std::copy(x, x + count, buf);
  return hn::Load(d, buf);
}

template <class D>
HWY_INLINE void StoreTail(D d, hn::Vec<D> v, size_t count, float* out) {
  HWY_ALIGN float buf[kMaxLanes];
  hn::Store(v, d, buf);
  std::copy(buf, buf + count, out);
}

float RowMaxImpl(const float* x, int64_t n64) {
  const hn::ScalableTag<float> d;
  const size_t n = size_t(n64), lanes = hn::Lanes(d);
  const float lowest = -std::numeric_limits<float>::infinity();
  auto m = hn::Set(d, lowest);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) m = hn::Max(m, hn::LoadU(d, x + i));
  if (i < n) m = hn::Max(m, LoadTail(d, x + i, n - i, lowest));
  return hn::GetLane(hn::MaxOfLanes(d, m));
}

double ExpShiftedImpl(const float* x, int64_t n64, float shift, float* out) {
  const hn::ScalableTag<float> d;
  const size_t n = size_t(n64), lanes = hn::Lanes(d);
  constexpr size_t kBlock = 1024;  // a multiple of every target's lane count
  const auto vshift = hn::Set(d, shift);
  double total = 0.0;
  size_t i = 0;
  while (i < n) {
    const size_t end = std::min(n, i + kBlock);
    auto sum = hn::Zero(d);
    for (; i + lanes <= end; i += lanes) {
      const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vshift));
      hn::StoreU(e, d, out + i);
      sum = hn::Add(sum, e);
    }
    if (i < end) {  // only at the row's end: kBlock is a multiple of the lane count
      const size_t count = end - i;
      const auto e = hn::Exp(d, hn::Sub(LoadTail(d, x + i, count, shift), vshift));
      StoreTail(d, e, count, out + i);
      sum = hn::Add(sum, hn::IfThenElseZero(hn::FirstN(d, count), e));
      i = end;
    }
    total += double(hn::GetLane(hn::SumOfLanes(d, sum)));
  }
  return total;
}

void ScaleRowImpl(float* x, int64_t n64, float s) {
  const hn::ScalableTag<float> d;
  const size_t n = size_t(n64), lanes = hn::Lanes(d);
  const auto vs = hn::Set(d, s);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), vs), d, x + i);
  if (i < n) StoreTail(d, hn::Mul(LoadTail(d, x + i, n - i, 0.0f), vs), n - i, x + i);
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace zs::nn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zs::nn {

HWY_EXPORT(RowMaxImpl);
HWY_EXPORT(ExpShiftedImpl);
HWY_EXPORT(ScaleRowImpl);
HWY_EXPORT(TargetNameImpl);

float RowMax(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(RowMaxImpl)(x, n); }

double ExpShifted(const float* x, int64_t n, float shift, float* out) {
  return HWY_DYNAMIC_DISPATCH(ExpShiftedImpl)(x, n, shift, out);
}

void ScaleRow(float* x, int64_t n, float s) { HWY_DYNAMIC_DISPATCH(ScaleRowImpl)(x, n, s); }

const char* SoftmaxKernelTarget() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace zs::nn
#endif  // HWY_ONCE
