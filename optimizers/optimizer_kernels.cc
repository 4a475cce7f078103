// The per-target half of optimizer_kernels.h: Highway compiles this file once per SIMD target
// (foreach_target.h) and RunOptimizerKernel picks the best one at run time.
//
// [Note: fused bf16 states] bf16 states are loaded, widened, updated and stochastically rounded
// back in registers (stochastic_rounding-inl.h), so a step with bf16 states moves 2 bytes per
// state each way and makes no extra pass over a scratch copy; the random bits are those of
// EncodeState, so the result equals decode-update-encode bit for bit.
//
// [Note: identical tails] The last partial vector of a range is copied into a padded buffer and
// run through the same vector body, so an element's bits never depend on where a range (a tile,
// a weight-decay segment, a sub-shard) starts or ends.

// SSSE3 adds nothing over EMU128 for us and lacks the i32 -> u16 pack; AVX3_DL nothing over AVX3.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_AVX3_DL)
#endif

#include "optimizers/optimizer_kernels.h"

#include <cstddef>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "optimizers/optimizer_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "optimizers/stochastic_rounding-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zs::internal {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DU16 = hn::Rebind<uint16_t, DF>;
using VF = hn::Vec<DF>;
using VU = hn::Vec<DU>;

// Unsigned a > b for values below 2^31 (compared as int32, which every target has).
HWY_INLINE hn::Mask<DU> GreaterU31(VU a, VU b) {
  const DI di;
  const DU du;
  return hn::RebindMask(du, hn::Gt(hn::BitCast(di, a), hn::BitCast(di, b)));
}

// ---- gradient loads (exactly runtime/base/dtype.h's BF16ToFloat / F16ToFloat) --------------

template <DType G>
HWY_INLINE VF LoadGrad(const void* grad, size_t i) {
  const DF df;
  const DU du;
  const DU16 du16;
  if constexpr (G == DType::kF32) {
    return hn::LoadU(df, static_cast<const float*>(grad) + i);
  } else if constexpr (G == DType::kBF16) {
    const auto h = hn::PromoteTo(du, hn::LoadU(du16, static_cast<const uint16_t*>(grad) + i));
    return hn::BitCast(df, hn::ShiftLeft<16>(h));
  } else {
    const DI di;
    const VU h = hn::PromoteTo(du, hn::LoadU(du16, static_cast<const uint16_t*>(grad) + i));
    const VU sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
    const VU exp_man = hn::And(h, hn::Set(du, 0x7fffu));
    // Normal: rebias the exponent (15 -> 127). Inf / NaN: all-ones exponent, mantissa kept.
    const VU normal = hn::Add(hn::ShiftLeft<13>(exp_man), hn::Set(du, 112u << 23));
    const VU inf_nan = hn::Or(hn::ShiftLeft<13>(exp_man), hn::Set(du, 0x7f800000u));
    // Subnormal: man * 2^-24, exact in float (and independent of denormals-are-zero modes).
    const VF sub = hn::Mul(hn::ConvertTo(df, hn::BitCast(di, exp_man)), hn::Set(df, 0x1p-24f));
    VU bits =
        hn::IfThenElse(GreaterU31(exp_man, hn::Set(du, 0x3ffu)), normal, hn::BitCast(du, sub));
    bits = hn::IfThenElse(GreaterU31(exp_man, hn::Set(du, 0x7bffu)), inf_nan, bits);
    return hn::BitCast(df, hn::Or(bits, sign));
  }
}

// ---- param_out stores (exactly FloatToBF16 / FloatToF16) ----------------------------------

// kParamNone: no param_out; otherwise the DType's value.
inline constexpr int kParamNone = -1;

template <int O>
HWY_INLINE void StoreParam(VF w, void* out, size_t i) {
  const DF df;
  const DI di;
  const DU du;
  const DU16 du16;
  if constexpr (O == int(DType::kF32)) {
    hn::StoreU(w, df, static_cast<float*>(out) + i);
  } else if constexpr (O == int(DType::kBF16)) {
    const VU u = hn::BitCast(du, w);
    const VU abs = hn::And(u, hn::Set(du, 0x7fffffffu));
    const VU hi = hn::ShiftRight<16>(u);
    const VU rounding = hn::Add(hn::Set(du, 0x7fffu), hn::And(hi, hn::Set(du, 1u)));
    const VU rounded = hn::ShiftRight<16>(hn::Add(u, rounding));
    const VU quiet_nan = hn::Or(hi, hn::Set(du, 0x40u));
    const VU bits = hn::IfThenElse(GreaterU31(abs, hn::Set(du, 0x7f800000u)), quiet_nan, rounded);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, bits)), du16, static_cast<uint16_t*>(out) + i);
  } else {
    const VU u = hn::BitCast(du, w);
    const VU sign = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 0x8000u));
    const VU abs = hn::And(u, hn::Set(du, 0x7fffffffu));
    // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even.
    const VU rounding =
        hn::Add(hn::Set(du, 0xfffu), hn::And(hn::ShiftRight<13>(abs), hn::Set(du, 1u)));
    VU bits = hn::ShiftRight<13>(hn::Add(hn::Sub(abs, hn::Set(du, 112u << 23)), rounding));
    // Subnormal (or zero) result: round abs * 2^24 to an integer, ties to even, as float does.
    const VF scaled = hn::Mul(hn::BitCast(df, abs), hn::Set(df, 0x1p24f));
    const VF r = hn::Sub(hn::Add(scaled, hn::Set(df, 0x1p23f)), hn::Set(df, 0x1p23f));
    const VU sub = hn::BitCast(du, hn::ConvertTo(di, r));
    bits = hn::IfThenElse(GreaterU31(hn::Set(du, 0x38800000u), abs), sub, bits);
    bits = hn::IfThenElse(GreaterU31(abs, hn::Set(du, 0x477fefffu)), hn::Set(du, 0x7c00u), bits);
    bits = hn::IfThenElse(GreaterU31(abs, hn::Set(du, 0x7f800000u)), hn::Set(du, 0x7e00u), bits);
    bits = hn::Or(bits, sign);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, bits)), du16, static_cast<uint16_t*>(out) + i);
  }
}

// ---- states: fp32 in place, or bf16 codes widened and rounded stochastically ----------------

template <bool kBF16>
HWY_INLINE VF LoadState(const void* state, size_t i) {
  const DF df;
  if constexpr (kBF16) {
    const DU du;
    const DU16 du16;
    const VU h = hn::PromoteTo(du, hn::LoadU(du16, static_cast<const uint16_t*>(state) + i));
    return hn::BitCast(df, hn::ShiftLeft<16>(h));
  } else {
    return hn::LoadU(df, static_cast<const float*>(state) + i);
  }
}

// `r`: the state's 16 random bits per lane (bf16 states; unused for fp32).
template <bool kBF16>
HWY_INLINE void StoreState(VF x, void* state, size_t i, VU r) {
  const DF df;
  if constexpr (kBF16) {
    const DU du;
    const DI di;
    const DU16 du16;
    const VU bits = sr::HWY_NAMESPACE::RoundToBF16Bits(du, hn::BitCast(du, x), r);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, bits)), du16, static_cast<uint16_t*>(state) + i);
  } else {
    (void)r;
    hn::StoreU(x, df, static_cast<float*>(state) + i);
  }
}

// ---- the update of one vector of elements at index i ---------------------------------------

template <OptimizerKind K, DType G, int O, bool S>
HWY_INLINE void Body(const KernelConstants& c, const KernelRange& r, float* master, void* s0,
                     void* s1, const void* grad, void* out, size_t i, uint32_t index) {
  const DF df;
  const DU du;
  const float wd = r.weight_decay;
  const float grad_scale = r.grad_scale;
  // bf16 states: one hash per element, its high half rounds state 0 and its low half state 1
  // ([Note: stochastic rounding bits]).
  VU r0 = hn::Zero(du), r1 = hn::Zero(du);
  if constexpr (S) {
    namespace srv = sr::HWY_NAMESPACE;
    const VU hash = srv::SrHashV(du, hn::Add(hn::Iota(du, 0), hn::Set(du, index)), r.sr_key);
    r0 = srv::SrBitsV(du, hash, 0);
    r1 = srv::SrBitsV(du, hash, 1);
  }
  VF w = hn::LoadU(df, master + i);
  VF g = hn::Mul(LoadGrad<G>(grad, i), hn::Set(df, grad_scale));
  if constexpr (K == OptimizerKind::kAdamW || K == OptimizerKind::kAdam) {
    // Operation order of optimizers/adamw_reference.cc.
    if constexpr (K == OptimizerKind::kAdam) g = hn::Add(g, hn::Mul(hn::Set(df, wd), w));
    const VF m = hn::Add(hn::Mul(hn::Set(df, c.beta1), LoadState<S>(s0, i)),
                         hn::Mul(hn::Set(df, c.one_minus_beta1), g));
    VF v_old = LoadState<S>(s1, i);
    if (!S && r.second_moment_as_root) v_old = hn::Mul(v_old, v_old);
    const VF v = hn::Add(hn::Mul(hn::Set(df, c.beta2), v_old),
                         hn::Mul(hn::Mul(hn::Set(df, c.one_minus_beta2), g), g));
    const VF root_v = hn::Sqrt(v);
    StoreState<S>(m, s0, i, r0);
    StoreState<S>(!S && r.second_moment_as_root ? root_v : v, s1, i, r1);
    const VF denom = hn::Add(hn::Mul(root_v, hn::Set(df, c.inv_sqrt_bc2)), hn::Set(df, c.eps));
    if constexpr (K == OptimizerKind::kAdamW) w = hn::Mul(w, hn::Set(df, 1.0f - c.lr * wd));
    w = hn::Sub(w, hn::Div(hn::Mul(hn::Set(df, c.step_size), m), denom));
  } else if constexpr (K == OptimizerKind::kSgd) {
    g = hn::Add(g, hn::Mul(hn::Set(df, wd), w));
    VF update = g;
    if (c.sgd_momentum) {
      const VF buf =
          c.sgd_first_step ? g : hn::Add(hn::Mul(hn::Set(df, c.beta1), LoadState<S>(s0, i)), g);
      StoreState<S>(buf, s0, i, r0);
      update = c.nesterov ? hn::Add(g, hn::Mul(hn::Set(df, c.beta1), buf)) : buf;
    }
    w = hn::Sub(w, hn::Mul(hn::Set(df, c.lr), update));
  } else if constexpr (K == OptimizerKind::kAdagrad) {
    g = hn::Add(g, hn::Mul(hn::Set(df, wd), w));
    VF s_old = LoadState<S>(s0, i);
    if (!S && r.second_moment_as_root) s_old = hn::Mul(s_old, s_old);
    const VF s = hn::Add(s_old, hn::Mul(g, g));
    const VF root_s = hn::Sqrt(s);
    StoreState<S>(!S && r.second_moment_as_root ? root_s : s, s0, i, r0);
    const VF denom = hn::Add(root_s, hn::Set(df, c.eps));
    w = hn::Sub(w, hn::Div(hn::Mul(hn::Set(df, c.lr), g), denom));
  } else {  // Lion
    const VF m = LoadState<S>(s0, i);
    w = hn::Mul(w, hn::Set(df, 1.0f - c.lr * wd));
    const VF mix =
        hn::Add(hn::Mul(hn::Set(df, c.beta1), m), hn::Mul(hn::Set(df, c.one_minus_beta1), g));
    // sign(mix) with sign(0) = 0 (and 0 for NaN: both comparisons are false).
    const VF zero = hn::Zero(df);
    const VF sign = hn::IfThenElse(hn::Gt(mix, zero), hn::Set(df, 1.0f),
                                   hn::IfThenElse(hn::Lt(mix, zero), hn::Set(df, -1.0f), zero));
    w = hn::Sub(w, hn::Mul(hn::Set(df, c.lr), sign));
    StoreState<S>(
        hn::Add(hn::Mul(hn::Set(df, c.beta2), m), hn::Mul(hn::Set(df, c.one_minus_beta2), g)), s0,
        i, r0);
  }
  hn::StoreU(w, df, master + i);
  if constexpr (O != kParamNone) StoreParam<O>(w, out, i);
}

template <OptimizerKind K, DType G, int O, bool S>
HWY_NOINLINE void Loop(const KernelConstants& c, const KernelRange& r) {
  const DF df;
  const size_t lanes = hn::Lanes(df);
  const size_t n = static_cast<size_t>(r.n);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    Body<K, G, O, S>(c, r, r.master, r.state0, r.state1, r.grad, r.param_out, i,
                     r.index_lo + static_cast<uint32_t>(i));
  }
  if (i == n) return;
  // [Note: identical tails] the remainder goes through the same body on a padded copy.
  constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
  HWY_ALIGN float master[kMaxLanes] = {};
  HWY_ALIGN float s0[kMaxLanes] = {};
  HWY_ALIGN float s1[kMaxLanes] = {};
  HWY_ALIGN uint8_t grad[kMaxLanes * sizeof(float)] = {};
  HWY_ALIGN uint8_t out[kMaxLanes * sizeof(float)] = {};
  const size_t count = n - i;
  const size_t grad_size = DTypeSize(r.grad_dtype);
  const size_t state_size = S ? sizeof(uint16_t) : sizeof(float);
  std::memcpy(master, r.master + i, count * sizeof(float));
  if (r.state0 != nullptr) {
    std::memcpy(s0, static_cast<const uint8_t*>(r.state0) + i * state_size, count * state_size);
  }
  if (r.state1 != nullptr) {
    std::memcpy(s1, static_cast<const uint8_t*>(r.state1) + i * state_size, count * state_size);
  }
  std::memcpy(grad, static_cast<const uint8_t*>(r.grad) + i * grad_size, count * grad_size);
  Body<K, G, O, S>(c, r, master, s0, s1, grad, out, 0, r.index_lo + static_cast<uint32_t>(i));
  std::memcpy(r.master + i, master, count * sizeof(float));
  if (r.state0 != nullptr) {
    std::memcpy(static_cast<uint8_t*>(r.state0) + i * state_size, s0, count * state_size);
  }
  if (r.state1 != nullptr) {
    std::memcpy(static_cast<uint8_t*>(r.state1) + i * state_size, s1, count * state_size);
  }
  if constexpr (O != kParamNone) {
    const size_t out_size = DTypeSize(static_cast<DType>(O));
    std::memcpy(static_cast<uint8_t*>(r.param_out) + i * out_size, out, count * out_size);
  }
}

template <OptimizerKind K, DType G, int O>
void DispatchStates(const KernelConstants& c, const KernelRange& r) {
  if (r.bf16_states) return Loop<K, G, O, true>(c, r);
  return Loop<K, G, O, false>(c, r);
}

template <OptimizerKind K, DType G>
void DispatchParam(const KernelConstants& c, const KernelRange& r) {
  if (r.param_out == nullptr) return DispatchStates<K, G, kParamNone>(c, r);
  switch (r.param_dtype) {
    case DType::kF32:
      return DispatchStates<K, G, int(DType::kF32)>(c, r);
    case DType::kBF16:
      return DispatchStates<K, G, int(DType::kBF16)>(c, r);
    case DType::kF16:
      return DispatchStates<K, G, int(DType::kF16)>(c, r);
  }
}

template <OptimizerKind K>
void DispatchGrad(const KernelConstants& c, const KernelRange& r) {
  switch (r.grad_dtype) {
    case DType::kF32:
      return DispatchParam<K, DType::kF32>(c, r);
    case DType::kBF16:
      return DispatchParam<K, DType::kBF16>(c, r);
    case DType::kF16:
      return DispatchParam<K, DType::kF16>(c, r);
  }
}

}  // namespace

void RunKernelImpl(const KernelConstants& c, const KernelRange& r) {
  switch (c.kind) {
    case OptimizerKind::kAdamW:
      return DispatchGrad<OptimizerKind::kAdamW>(c, r);
    case OptimizerKind::kAdam:
      return DispatchGrad<OptimizerKind::kAdam>(c, r);
    case OptimizerKind::kSgd:
      return DispatchGrad<OptimizerKind::kSgd>(c, r);
    case OptimizerKind::kAdagrad:
      return DispatchGrad<OptimizerKind::kAdagrad>(c, r);
    case OptimizerKind::kLion:
      return DispatchGrad<OptimizerKind::kLion>(c, r);
  }
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace zs::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cmath>

namespace zs::internal {

HWY_EXPORT(RunKernelImpl);
HWY_EXPORT(TargetNameImpl);

KernelConstants MakeKernelConstants(const OptimizerHyper& h) {
  KernelConstants c;
  c.kind = h.kind;
  c.lr = h.lr;
  c.beta1 = h.beta1;
  c.one_minus_beta1 = 1.0f - h.beta1;
  c.beta2 = h.beta2;
  c.one_minus_beta2 = 1.0f - h.beta2;
  c.eps = h.eps;
  // Bias corrections in double once per step, as optimizers/adamw_reference.cc does.
  const double bc1 = 1.0 - std::pow(double(h.beta1), double(h.step));
  const double bc2 = 1.0 - std::pow(double(h.beta2), double(h.step));
  c.step_size = float(double(h.lr) / bc1);
  c.inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  c.sgd_momentum = h.beta1 != 0.0f;
  c.sgd_first_step = h.step == 1;
  c.nesterov = h.nesterov;
  return c;
}

void RunOptimizerKernel(const KernelConstants& c, const KernelRange& r) {
  if (r.n <= 0) return;
  HWY_DYNAMIC_DISPATCH(RunKernelImpl)(c, r);
}

const char* OptimizerKernelTarget() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace zs::internal
#endif  // HWY_ONCE
