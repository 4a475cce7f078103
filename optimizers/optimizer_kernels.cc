// The per-target half of optimizer_kernels.h: Highway compiles this file once per SIMD target
// (foreach_target.h) and RunOptimizerKernel picks the best one at run time.
//
// [Note: fused bf16 states] bf16 states are loaded, widened, updated and stochastically rounded
// back in registers (stochastic_rounding-inl.h), so a step with bf16 states moves 2 bytes per
// state each way and makes no extra pass over a scratch copy; the random bits are those of
// EncodeState, so the result equals decode-update-encode bit for bit. The body runs two vectors
// at a time so that one permute packs the 16-bit results of both (StoreUpperHalves).
//
// [Note: identical tails] The last partial vector of a range is copied into a padded buffer and
// run through the same vector body, so an element's bits never depend on where a range (a tile,
// a weight-decay segment, a sub-shard) starts or ends.

// SSSE3 adds nothing over EMU128 for us and lacks the i32 -> u16 pack; AVX3_DL nothing over AVX3.
// SVE's sizeless vectors cannot be struct members (Vectors, Hoisted): Arm runs the NEON target.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS \
  (HWY_SSSE3 | HWY_AVX3_DL | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
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
using DU16 = hn::Rebind<uint16_t, DF>;         // half a vector of u16: one per float lane
using DU16x2 = hn::Repartition<uint16_t, DF>;  // a full vector of u16: two per float lane
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

// ---- narrowing to 16 bits, two vectors at a time -----------------------------------------------

// bf16 results are computed in 32-bit lanes with the bf16 bits in the upper half; one ConcatOdd
// (a single two-source permute on AVX-512) packs the upper halves of two vectors, in order,
// where one vector at a time would need a shift and a saturating demotion each.
HWY_INLINE void StoreUpperHalves(VU lo, VU hi, uint16_t* out) {
#if HWY_TARGET == HWY_SCALAR  // one lane: no two-lane u16 vector to permute into
  const DI di;
  const DU16 du16;
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, hn::ShiftRight<16>(lo))), du16, out);
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, hn::ShiftRight<16>(hi))), du16, out + 1);
#else
  const DU16x2 d16;
  hn::StoreU(hn::ConcatOdd(d16, hn::BitCast(d16, hi), hn::BitCast(d16, lo)), d16, out);
#endif
}

// ---- param_out stores (exactly FloatToBF16 / FloatToF16) ----------------------------------

// kParamNone: no param_out; otherwise the DType's value.
inline constexpr int kParamNone = -1;

// bf16 round to nearest even: the stochastic rounding of RoundToBF16Upper with the fixed
// "random" bits 0x7fff + (lowest kept bit), which ties to even.
HWY_INLINE VU BF16NearestUpper(VF w) {
  const DU du;
  const VU u = hn::BitCast(du, w);
  const VU rounding =
      hn::Add(hn::Set(du, 0x7fffu), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u)));
  return sr::HWY_NAMESPACE::RoundToBF16Upper(du, u, rounding);
}

HWY_INLINE VU F16Bits(VF w) {
  const DF df;
  const DI di;
  const DU du;
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
  return hn::Or(bits, sign);
}

// Stores the param_out copies of two consecutive vectors w0 (at i) and w1 (at i + lanes).
template <int O>
HWY_INLINE void StoreParams(VF w0, VF w1, void* out, size_t i) {
  const DF df;
  if constexpr (O == int(DType::kF32)) {
    float* p = static_cast<float*>(out) + i;
    hn::StoreU(w0, df, p);
    hn::StoreU(w1, df, p + hn::Lanes(df));
  } else if constexpr (O == int(DType::kBF16)) {
    StoreUpperHalves(BF16NearestUpper(w0), BF16NearestUpper(w1), static_cast<uint16_t*>(out) + i);
  } else {
    // f16 bits sit in the low half of each lane; every lane is <= 0xffff, so the saturating
    // demotion is a plain truncation.
    const DI di;
    const DU16 du16;
    uint16_t* p = static_cast<uint16_t*>(out) + i;
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, F16Bits(w0))), du16, p);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, F16Bits(w1))), du16, p + hn::Lanes(df));
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

// Stores the new values x0 (at i) and x1 (at i + lanes) of a state; for bf16 states r0 and r1
// are their 16 random bits per lane.
template <bool kBF16>
HWY_INLINE void StoreStates(VF x0, VF x1, void* state, size_t i, VU r0, VU r1) {
  const DF df;
  if constexpr (kBF16) {
    const DU du;
    namespace srv = sr::HWY_NAMESPACE;
    StoreUpperHalves(srv::RoundToBF16Upper(du, hn::BitCast(du, x0), r0),
                     srv::RoundToBF16Upper(du, hn::BitCast(du, x1), r1),
                     static_cast<uint16_t*>(state) + i);
  } else {
    (void)r0;
    (void)r1;
    float* p = static_cast<float*>(state) + i;
    hn::StoreU(x0, df, p);
    hn::StoreU(x1, df, p + hn::Lanes(df));
  }
}

// ---- the update of one vector of elements ----------------------------------------------------

// The constants of one range, broadcast once per Loop call and passed down to the body. Read
// through `c` inside the loop they would be reloaded (and 1 - lr * wd recomputed) after every
// store: the kernel stores through float pointers, which may alias KernelConstants' floats.
struct Hoisted {
  VF beta1, one_minus_beta1, beta2, one_minus_beta2, eps, step_size, inv_sqrt_bc2;
  VF lr, wd, decay;  // decay = 1 - lr * wd (AdamW, Lion)
  VF grad_scale;
  VU sr_k1, sr_k2;  // bf16 states: the range's stochastic-rounding key
  bool as_root, reads_s0, writes_s0, sgd_momentum, sgd_first_step, nesterov;
};

// Which states a kind reads and writes this step.
template <OptimizerKind K>
constexpr int NumKernelStates() {
  return K == OptimizerKind::kAdamW || K == OptimizerKind::kAdam ? 2 : 1;
}

template <OptimizerKind K, bool S>
HWY_INLINE Hoisted MakeHoisted(const KernelConstants& c, const KernelRange& r) {
  const DF df;
  const DU du;
  Hoisted k;
  k.beta1 = hn::Set(df, c.beta1);
  k.one_minus_beta1 = hn::Set(df, c.one_minus_beta1);
  k.beta2 = hn::Set(df, c.beta2);
  k.one_minus_beta2 = hn::Set(df, c.one_minus_beta2);
  k.eps = hn::Set(df, c.eps);
  k.step_size = hn::Set(df, c.step_size);
  k.inv_sqrt_bc2 = hn::Set(df, c.inv_sqrt_bc2);
  k.lr = hn::Set(df, c.lr);
  k.wd = hn::Set(df, r.weight_decay);
  k.decay = hn::Set(df, 1.0f - c.lr * r.weight_decay);
  k.grad_scale = hn::Set(df, r.grad_scale);
  k.sr_k1 = hn::Set(du, r.sr_key.k1);
  k.sr_k2 = hn::Set(du, r.sr_key.k2);
  k.as_root = !S && r.second_moment_as_root;
  k.reads_s0 = K != OptimizerKind::kSgd || (c.sgd_momentum && !c.sgd_first_step);
  k.writes_s0 = K != OptimizerKind::kSgd || c.sgd_momentum;
  k.sgd_momentum = c.sgd_momentum;
  k.sgd_first_step = c.sgd_first_step;
  k.nesterov = c.nesterov;
  return k;
}

// One vector's values: loaded into w, g (scaled), s0, s1; Update leaves the new master weights
// in w and the values to store in s0, s1.
struct Vectors {
  VF w, g, s0, s1;
};

template <OptimizerKind K, DType G, bool S>
HWY_INLINE Vectors LoadVectors(const Hoisted& k, const float* master, const void* s0,
                               const void* s1, const void* grad, size_t at) {
  const DF df;
  Vectors x;
  x.w = hn::LoadU(df, master + at);
  x.g = hn::Mul(LoadGrad<G>(grad, at), k.grad_scale);
  x.s0 = k.reads_s0 ? LoadState<S>(s0, at) : hn::Zero(df);
  x.s1 = NumKernelStates<K>() == 2 ? LoadState<S>(s1, at) : hn::Zero(df);
  return x;
}

template <OptimizerKind K>
HWY_INLINE void Update(const Hoisted& k, Vectors& x) {
  const DF df;
  VF w = x.w;
  VF g = x.g;
  if constexpr (K == OptimizerKind::kAdamW || K == OptimizerKind::kAdam) {
    // Operation order of optimizers/adamw_reference.cc.
    if constexpr (K == OptimizerKind::kAdam) g = hn::Add(g, hn::Mul(k.wd, w));
    const VF m = hn::Add(hn::Mul(k.beta1, x.s0), hn::Mul(k.one_minus_beta1, g));
    const VF v_old = k.as_root ? hn::Mul(x.s1, x.s1) : x.s1;
    const VF v = hn::Add(hn::Mul(k.beta2, v_old), hn::Mul(hn::Mul(k.one_minus_beta2, g), g));
    const VF root_v = hn::Sqrt(v);
    x.s0 = m;
    x.s1 = k.as_root ? root_v : v;
    const VF denom = hn::Add(hn::Mul(root_v, k.inv_sqrt_bc2), k.eps);
    if constexpr (K == OptimizerKind::kAdamW) w = hn::Mul(w, k.decay);
    w = hn::Sub(w, hn::Div(hn::Mul(k.step_size, m), denom));
  } else if constexpr (K == OptimizerKind::kSgd) {
    g = hn::Add(g, hn::Mul(k.wd, w));
    VF update = g;
    if (k.sgd_momentum) {
      const VF buf = k.sgd_first_step ? g : hn::Add(hn::Mul(k.beta1, x.s0), g);
      x.s0 = buf;
      update = k.nesterov ? hn::Add(g, hn::Mul(k.beta1, buf)) : buf;
    }
    w = hn::Sub(w, hn::Mul(k.lr, update));
  } else if constexpr (K == OptimizerKind::kAdagrad) {
    g = hn::Add(g, hn::Mul(k.wd, w));
    const VF s_old = k.as_root ? hn::Mul(x.s0, x.s0) : x.s0;
    const VF s = hn::Add(s_old, hn::Mul(g, g));
    const VF root_s = hn::Sqrt(s);
    x.s0 = k.as_root ? root_s : s;
    const VF denom = hn::Add(root_s, k.eps);
    w = hn::Sub(w, hn::Div(hn::Mul(k.lr, g), denom));
  } else {  // Lion
    const VF m = x.s0;
    w = hn::Mul(w, k.decay);
    const VF mix = hn::Add(hn::Mul(k.beta1, m), hn::Mul(k.one_minus_beta1, g));
    // sign(mix) with sign(0) = 0 (and 0 for NaN: both comparisons are false).
    const VF zero = hn::Zero(df);
    const VF sign = hn::IfThenElse(hn::Gt(mix, zero), hn::Set(df, 1.0f),
                                   hn::IfThenElse(hn::Lt(mix, zero), hn::Set(df, -1.0f), zero));
    w = hn::Sub(w, hn::Mul(k.lr, sign));
    x.s0 = hn::Add(hn::Mul(k.beta2, m), hn::Mul(k.one_minus_beta2, g));
  }
  x.w = w;
}

// Updates the two vectors of elements at i and i + lanes (`index`: element i's low 32 index
// bits). Two at a time, so 16-bit results are packed with one permute (StoreUpperHalves). The
// two are named values, not an array: GCC kept an array of them on the stack.
template <OptimizerKind K, DType G, int O, bool S>
HWY_INLINE void Body2(const Hoisted& k, float* master, void* s0, void* s1, const void* grad,
                      void* out, size_t i, uint32_t index) {
  const DF df;
  const DU du;
  const size_t lanes = hn::Lanes(df);
  Vectors a = LoadVectors<K, G, S>(k, master, s0, s1, grad, i);
  Vectors b = LoadVectors<K, G, S>(k, master, s0, s1, grad, i + lanes);
  Update<K>(k, a);
  Update<K>(k, b);
  hn::StoreU(a.w, df, master + i);
  hn::StoreU(b.w, df, master + i + lanes);
  if constexpr (O != kParamNone) StoreParams<O>(a.w, b.w, out, i);
  // bf16 states: one hash per element, its high half rounds state 0 and its low half state 1
  // ([Note: stochastic rounding bits]).
  namespace srv = sr::HWY_NAMESPACE;
  VU hash_a = hn::Zero(du), hash_b = hn::Zero(du);
  if constexpr (S) {
    const VU idx = hn::Add(hn::Iota(du, 0), hn::Set(du, index));
    hash_a = srv::SrHashV(du, idx, k.sr_k1, k.sr_k2);
    hash_b = srv::SrHashV(du, hn::Add(idx, hn::Set(du, uint32_t(lanes))), k.sr_k1, k.sr_k2);
  }
  if (k.writes_s0) {
    StoreStates<S>(a.s0, b.s0, s0, i, srv::SrBitsV(du, hash_a, 0), srv::SrBitsV(du, hash_b, 0));
  }
  if constexpr (NumKernelStates<K>() == 2) {
    StoreStates<S>(a.s1, b.s1, s1, i, srv::SrBitsV(du, hash_a, 1), srv::SrBitsV(du, hash_b, 1));
  }
}

template <OptimizerKind K, DType G, int O, bool S>
HWY_NOINLINE void Loop(const KernelConstants& c, const KernelRange& r) {
  const DF df;
  const size_t step = 2 * hn::Lanes(df);
  const size_t n = static_cast<size_t>(r.n);
  const Hoisted k = MakeHoisted<K, S>(c, r);
  // Pointers copied out of `r` for the same reason as Hoisted: stores may alias `r`.
  float* const master_ptr = r.master;
  void* const s0_ptr = r.state0;
  void* const s1_ptr = r.state1;
  const void* const grad_ptr = r.grad;
  void* const out_ptr = r.param_out;
  const uint32_t index_lo = r.index_lo;
  size_t i = 0;
  for (; i + step <= n; i += step) {
    Body2<K, G, O, S>(k, master_ptr, s0_ptr, s1_ptr, grad_ptr, out_ptr, i,
                      index_lo + static_cast<uint32_t>(i));
  }
  if (i == n) return;
  // [Note: identical tails] the remainder goes through the same body on a padded copy.
  constexpr size_t kMaxLanes = 2 * HWY_MAX_BYTES / sizeof(float);
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
  Body2<K, G, O, S>(k, master, s0, s1, grad, out, 0, index_lo + static_cast<uint32_t>(i));
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
