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
// SVE, SVE2 and their fixed-width variants are built ([Note: vectors as values]).
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_AVX3_DL)
#endif

#include "optimizers/optimizer_kernels.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "optimizers/optimizer_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "optimizers/dtype_conversions-inl.h"
#include "optimizers/int8_block-inl.h"
#include "optimizers/stochastic_rounding-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zs::internal {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// ---- states: fp32 in place, bf16 codes rounded stochastically, or int8 codes ------------------

// Bytes per element of a state as the kernel reads it, and as it writes it: int8 states are
// read as codes and written as fp32 values into a block buffer ([Note: fused int8 states]).
template <StateDType S>
constexpr size_t StateInBytes() {
  return StateCodeBytes(S);
}
template <StateDType S>
constexpr size_t StateOutBytes() {
  return S == StateDType::kBF16 ? 2 : 4;
}

// The fp32 value of a state at element i; `scale` is the int8 block's scale, broadcast.
template <StateDType S>
HWY_INLINE VF LoadState(const void* state, size_t i, VF scale) {
  const DF df;
  static_assert(S != StateDType::kBF16);  // two vectors at a time: LoadState2
  if constexpr (S == StateDType::kInt8) {
    return int8q::HWY_NAMESPACE::DecodeInt8V(df, static_cast<const int8_t*>(state) + i, scale);
  } else {
    (void)scale;
    return hn::LoadU(df, static_cast<const float*>(state) + i);
  }
}

// The values of a state at the two vectors i and i + lanes.
template <StateDType S>
HWY_INLINE void LoadState2(const void* state, size_t i, VF scale, VF& a, VF& b) {
  if constexpr (S == StateDType::kBF16) {
    WidenBF16Pair(static_cast<const uint16_t*>(state) + i, a, b);
  } else {
    a = LoadState<S>(state, i, scale);
    b = LoadState<S>(state, i + hn::Lanes(DF()), scale);
  }
}

// Stores the new values x0 (at i) and x1 (at i + lanes) of a state; for bf16 states r0 and r1
// are their 16 random bits per lane and kNaN whether a lane may be NaN. int8 states store fp32
// (to the block buffer).
template <StateDType S, bool kNaN>
HWY_INLINE void StoreStates(VF x0, VF x1, void* state, size_t i, VU r0, VU r1) {
  const DF df;
  if constexpr (S == StateDType::kBF16) {
    const DU du;
    namespace srv = sr::HWY_NAMESPACE;
    if constexpr (kNaN) {
      StoreUpperHalves(srv::RoundToBF16Upper(du, hn::BitCast(du, x0), r0),
                       srv::RoundToBF16Upper(du, hn::BitCast(du, x1), r1),
                       static_cast<uint16_t*>(state) + i);
    } else {
      StoreUpperHalves(srv::RoundNonNaNToBF16Upper(du, hn::BitCast(du, x0), r0),
                       srv::RoundNonNaNToBF16Upper(du, hn::BitCast(du, x1), r1),
                       static_cast<uint16_t*>(state) + i);
    }
  } else {
    (void)r0;
    (void)r1;
    float* p = static_cast<float*>(state) + i;
    hn::StoreU(x0, df, p);
    hn::StoreU(x1, df, p + hn::Lanes(df));
  }
}

// ---- the update of one vector of elements ----------------------------------------------------

// [Note: vectors as values] Vectors live in local variables and function parameters only,
// never in structs: SVE's vectors are sizeless and cannot be struct members, and on Arm GCC 12
// compiles the implicit constructor of a struct of vectors in the HWY_BEFORE_NAMESPACE region
// without the region's target attribute, where (Highway 1.0's NEON target string) it cannot
// inline Vec128's constructor, a build error. So a range's constants are scalars (Hoisted),
// broadcast where the body uses them, and an element's values are four named vectors passed by
// reference. `make test-arm` builds and runs this file for NEON, SVE, SVE2, SVE_256 and SVE2_128.

// The constants of one range, copied once per Loop call into a local the body reads. Read
// through `c` inside the loop they would be reloaded (and 1 - lr * wd recomputed) after every
// store: the kernel stores through float pointers, which may alias KernelConstants' floats, but
// not a local whose address never escapes, so the broadcasts are hoisted out of the loop.
struct Hoisted {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps, step_size, inv_sqrt_bc2;
  float lr, wd, decay;  // decay = 1 - lr * wd (AdamW, Lion)
  float grad_scale;
  bool scale_grad;  // grad_scale != 1: x * 1 is x, so unscaled gradients skip the multiply
  uint32_t sr_k1, sr_k2;  // bf16 states: the range's stochastic-rounding key
  uint32_t sr_block_key;  // bf16 states: the current 64K block's SrBlockKey & -2 lanes
  float scale0, scale1;   // int8 states: the current block's scales (set per block)
  bool as_root, reads_s0, writes_s0, sgd_momentum, sgd_first_step, nesterov;
  bool stream_out;  // param_out through non-temporal stores where aligned
  size_t prefetch;  // elements ahead whose input lines are prefetched, 0 for none
};

// Which states a kind reads and writes this step.
template <OptimizerKind K>
constexpr int NumKernelStates() {
  return K == OptimizerKind::kAdamW || K == OptimizerKind::kAdam ? 2 : 1;
}

template <OptimizerKind K, StateDType S>
HWY_INLINE Hoisted MakeHoisted(const KernelConstants& c, const KernelRange& r) {
  return Hoisted{
      .beta1 = c.beta1,
      .one_minus_beta1 = c.one_minus_beta1,
      .beta2 = c.beta2,
      .one_minus_beta2 = c.one_minus_beta2,
      .eps = c.eps,
      .step_size = c.step_size,
      .inv_sqrt_bc2 = c.inv_sqrt_bc2,
      .lr = c.lr,
      .wd = r.weight_decay,
      .decay = 1.0f - c.lr * r.weight_decay,
      .grad_scale = r.grad_scale,
      .scale_grad = r.grad_scale != 1.0f,
      .sr_k1 = r.sr_key.k1,
      .sr_k2 = r.sr_key.k2,
      .sr_block_key = 0,
      .scale0 = 0.0f,
      .scale1 = 0.0f,
      // int8 codes always hold the root ([Note: int8 second moments]); so does the int8 scratch.
      .as_root = S == StateDType::kInt8 || (S == StateDType::kF32 && r.second_moment_as_root),
      .reads_s0 = K != OptimizerKind::kSgd || (c.sgd_momentum && !c.sgd_first_step),
      .writes_s0 = K != OptimizerKind::kSgd || c.sgd_momentum,
      .sgd_momentum = c.sgd_momentum,
      .sgd_first_step = c.sgd_first_step,
      .nesterov = c.nesterov,
      .stream_out = r.stream_param_out && r.param_out != nullptr,
      .prefetch = r.prefetch_elements,
  };
}

// The arrays of one run of elements, each pointer at the run's element 0 (null when absent).
// States are read from s*_in and written to s*_out: the same array for fp32 and bf16 states,
// int8 codes in and a block buffer of fp32 out for int8 states.
struct Arrays {
  float* master;
  const void* s0_in;
  const void* s1_in;
  void* s0_out;
  void* s1_out;
  const void* grad;
  void* out;
};

// The values of the two vectors of elements at i (a) and i + lanes (b): the master weights,
// the scaled gradients and the states (zero where the kind does not read one).
template <OptimizerKind K, DType G, StateDType S>
HWY_INLINE void Load2(const Hoisted& k, const Arrays& p, size_t i, VF& w_a, VF& g_a, VF& s0_a,
                      VF& s1_a, VF& w_b, VF& g_b, VF& s0_b, VF& s1_b) {
  const DF df;
  w_a = hn::LoadU(df, p.master + i);
  w_b = hn::LoadU(df, p.master + i + hn::Lanes(df));
  LoadGrad2<G>(p.grad, i, g_a, g_b);
  if (k.scale_grad) {
    g_a = hn::Mul(g_a, hn::Set(df, k.grad_scale));
    g_b = hn::Mul(g_b, hn::Set(df, k.grad_scale));
  }
  s0_a = s0_b = s1_a = s1_b = hn::Zero(df);
  if (k.reads_s0) LoadState2<S>(p.s0_in, i, hn::Set(df, k.scale0), s0_a, s0_b);
  if constexpr (NumKernelStates<K>() == 2) {
    LoadState2<S>(p.s1_in, i, hn::Set(df, k.scale1), s1_a, s1_b);
  }
}

// Updates one vector's values: leaves the new weights in w and the states to store in s0, s1.
template <OptimizerKind K>
HWY_INLINE void Update(const Hoisted& k, VF& w, VF g, VF& s0, VF& s1) {
  const DF df;
  const VF beta1 = hn::Set(df, k.beta1), one_minus_beta1 = hn::Set(df, k.one_minus_beta1);
  const VF beta2 = hn::Set(df, k.beta2), one_minus_beta2 = hn::Set(df, k.one_minus_beta2);
  const VF wd = hn::Set(df, k.wd), lr = hn::Set(df, k.lr), eps = hn::Set(df, k.eps);
  if constexpr (K == OptimizerKind::kAdamW || K == OptimizerKind::kAdam) {
    // Operation order of optimizers/adamw_reference.cc.
    if constexpr (K == OptimizerKind::kAdam) g = hn::Add(g, hn::Mul(wd, w));
    const VF m = hn::Add(hn::Mul(beta1, s0), hn::Mul(one_minus_beta1, g));
    const VF v_old = k.as_root ? hn::Mul(s1, s1) : s1;
    const VF v = hn::Add(hn::Mul(beta2, v_old), hn::Mul(hn::Mul(one_minus_beta2, g), g));
    const VF root_v = hn::Sqrt(v);
    s0 = m;
    s1 = k.as_root ? root_v : v;
    const VF denom = hn::Add(hn::Mul(root_v, hn::Set(df, k.inv_sqrt_bc2)), eps);
    if constexpr (K == OptimizerKind::kAdamW) w = hn::Mul(w, hn::Set(df, k.decay));
    w = hn::Sub(w, hn::Div(hn::Mul(hn::Set(df, k.step_size), m), denom));
  } else if constexpr (K == OptimizerKind::kSgd) {
    g = hn::Add(g, hn::Mul(wd, w));
    VF update = g;
    if (k.sgd_momentum) {
      const VF buf = k.sgd_first_step ? g : hn::Add(hn::Mul(beta1, s0), g);
      s0 = buf;
      update = k.nesterov ? hn::Add(g, hn::Mul(beta1, buf)) : buf;
    }
    w = hn::Sub(w, hn::Mul(lr, update));
  } else if constexpr (K == OptimizerKind::kAdagrad) {
    g = hn::Add(g, hn::Mul(wd, w));
    const VF s_old = k.as_root ? hn::Mul(s0, s0) : s0;
    const VF s = hn::Add(s_old, hn::Mul(g, g));
    const VF root_s = hn::Sqrt(s);
    s0 = k.as_root ? root_s : s;
    const VF denom = hn::Add(root_s, eps);
    w = hn::Sub(w, hn::Div(hn::Mul(lr, g), denom));
  } else {  // Lion
    const VF m = s0;
    w = hn::Mul(w, hn::Set(df, k.decay));
    const VF mix = hn::Add(hn::Mul(beta1, m), hn::Mul(one_minus_beta1, g));
    // sign(mix) with sign(0) = 0 (and 0 for NaN: both comparisons are false).
    const VF zero = hn::Zero(df);
    const VF sign = hn::IfThenElse(hn::Gt(mix, zero), hn::Set(df, 1.0f),
                                   hn::IfThenElse(hn::Lt(mix, zero), hn::Set(df, -1.0f), zero));
    w = hn::Sub(w, hn::Mul(lr, sign));
    s0 = hn::Add(hn::Mul(beta2, m), hn::Mul(one_minus_beta2, g));
  }
}

// [Note: NaN-free stores] Rounding to bf16 needs a select so that a NaN stays NaN; the select
// is skipped when no value to be rounded can be NaN, which one test on the new weights
// decides: NaN propagates through every operation of the AdamW, Adam, SGD and Adagrad
// updates into the weight (a NaN state or moment makes the weight's update NaN), so weights
// without NaN mean states without NaN. Lion's sign() stops NaN (sign(NaN) = 0), so its new
// momentum is tested too. inf needs no select (its low half is zero), and inf - inf only sends
// a pair down the NaN path, which gives the same bits.
template <OptimizerKind K>
HWY_INLINE bool MayBeNaN(VF w_a, VF w_b, VF s0_a, VF s0_b) {
  const DF df;
  VF sum = hn::Add(w_a, w_b);  // NaN if either is
  if constexpr (K == OptimizerKind::kLion) sum = hn::Add(sum, hn::Add(s0_a, s0_b));
  return !hn::AllFalse(df, hn::IsNaN(sum));
}

// Stores the param_out copies and the states of the two vectors a (at i) and b (at i + lanes).
template <OptimizerKind K, int O, StateDType S, bool kNaN>
HWY_INLINE void StoreRounded(const Hoisted& k, const Arrays& p, size_t i, bool stream, VF w_a,
                             VF w_b, VF s0_a, VF s0_b, VF s1_a, VF s1_b, VU hash_a, VU hash_b) {
  const DU du;
  namespace srv = sr::HWY_NAMESPACE;
  if constexpr (O != kParamNone) StoreParams<O, kNaN>(w_a, w_b, p.out, i, stream);
  if (k.writes_s0) {
    StoreStates<S, kNaN>(s0_a, s0_b, p.s0_out, i, srv::SrBitsV(du, hash_a, 0),
                         srv::SrBitsV(du, hash_b, 0));
  }
  if constexpr (NumKernelStates<K>() == 2) {
    StoreStates<S, kNaN>(s1_a, s1_b, p.s1_out, i, srv::SrBitsV(du, hash_a, 1),
                         srv::SrBitsV(du, hash_b, 1));
  }
}

// int8 states: the running max |new value| of each state over the current block's whole steps,
// as int32 bits (int8q::MaxAbsBits: associative even with NaN), one vector per state.
using VMax = hn::Vec<DI>;

// Updates the two vectors of elements at i and i + lanes (`index`: element i's low 32 index
// bits; `stream`: param_out through non-temporal stores). Two at a time, so 16-bit results are
// packed with one permute (StoreHalves). The two are named values, not an array: GCC kept an
// array of them on the stack. kInBlock (bf16 states): `index` is a multiple of 2 * lanes in
// the 64K block of k.sr_block_key, and lane_a, lane_b are the block's lane products
// ([Note: hashing within a 64K block]); otherwise they are unused.
template <OptimizerKind K, DType G, int O, StateDType S, bool kInBlock = false>
HWY_INLINE void Body2(const Hoisted& k, const Arrays& p, size_t i, uint32_t index, bool stream,
                      VMax& max0, VMax& max1, VU lane_a, VU lane_b) {
  const DF df;
  const DU du;
  const size_t lanes = hn::Lanes(df);
  // All loads before the updates: GCC keeps this order, and the out-of-order window then sees
  // the second vector's loads early (load, update, load, update measured 3-5% slower in L2).
  VF w_a = hn::Zero(df), g_a = w_a, s0_a = w_a, s1_a = w_a;
  VF w_b = w_a, g_b = w_a, s0_b = w_a, s1_b = w_a;
  Load2<K, G, S>(k, p, i, w_a, g_a, s0_a, s1_a, w_b, g_b, s0_b, s1_b);
  Update<K>(k, w_a, g_a, s0_a, s1_a);
  Update<K>(k, w_b, g_b, s0_b, s1_b);
  if constexpr (S == StateDType::kInt8) {
    namespace q8 = int8q::HWY_NAMESPACE;
    if (k.writes_s0) max0 = q8::MaxAbsBits(df, q8::MaxAbsBits(df, max0, s0_a), s0_b);
    if constexpr (NumKernelStates<K>() == 2) {
      max1 = q8::MaxAbsBits(df, q8::MaxAbsBits(df, max1, s1_a), s1_b);
    }
  }
  hn::StoreU(w_a, df, p.master + i);
  hn::StoreU(w_b, df, p.master + i + lanes);
  // bf16 states: one hash per element, its high half rounds state 0 and its low half state 1
  // ([Note: stochastic rounding bits]).
  namespace srv = sr::HWY_NAMESPACE;
  VU hash_a = hn::Zero(du), hash_b = hn::Zero(du);
  if constexpr (S == StateDType::kBF16) {
    const VU k2 = hn::Set(du, k.sr_k2);
    if constexpr (kInBlock) {
      const VU base = hn::Set(du, (index ^ k.sr_block_key) * sr::kFmix32C1);
      hash_a = srv::SrHashFromProductV(du, hn::Add(base, lane_a), k2);
      hash_b = srv::SrHashFromProductV(du, hn::Add(base, lane_b), k2);
    } else {
      const VU k1 = hn::Set(du, k.sr_k1);
      const VU idx = hn::Add(hn::Iota(du, 0), hn::Set(du, index));
      hash_a = srv::SrHashV(du, idx, k1, k2);
      hash_b = srv::SrHashV(du, hn::Add(idx, hn::Set(du, uint32_t(lanes))), k1, k2);
    }
  }
  if (HWY_LIKELY(!MayBeNaN<K>(w_a, w_b, s0_a, s0_b))) {
    StoreRounded<K, O, S, false>(k, p, i, stream, w_a, w_b, s0_a, s0_b, s1_a, s1_b, hash_a,
                                 hash_b);
  } else {
    StoreRounded<K, O, S, true>(k, p, i, stream, w_a, w_b, s0_a, s0_b, s1_a, s1_b, hash_a,
                                hash_b);
  }
}

const uint8_t* At(const void* p, size_t bytes) {
  return p == nullptr ? nullptr : static_cast<const uint8_t*>(p) + bytes;
}
uint8_t* At(void* p, size_t bytes) {
  return p == nullptr ? nullptr : static_cast<uint8_t*>(p) + bytes;
}

// Prefetches the cache lines of bytes [offset, offset + bytes) of `array` (none when null).
HWY_INLINE void PrefetchBytes(const void* array, size_t offset, size_t bytes) {
  if (array == nullptr) return;
  constexpr size_t kLine = 64;  // a larger line only makes some of these prefetches redundant
  const uint8_t* first = At(array, offset);
  for (size_t b = 0; b < bytes; b += kLine) hwy::Prefetch(first + b);
}

// Prefetches the lines of elements [j, j + count) of every array the kernel reads: the master
// weights, the gradient and the states as stored ([Note: software prefetch] in
// optimizer_spec.h). param_out is only written, through stores that need no read (streamed) or
// whose line the store itself brings in.
template <DType G, StateDType S>
HWY_INLINE void PrefetchInputs(const Arrays& p, size_t j, size_t count) {
  PrefetchBytes(p.master, j * sizeof(float), count * sizeof(float));
  PrefetchBytes(p.grad, j * DTypeSize(G), count * DTypeSize(G));
  PrefetchBytes(p.s0_in, j * StateInBytes<S>(), count * StateInBytes<S>());
  PrefetchBytes(p.s1_in, j * StateInBytes<S>(), count * StateInBytes<S>());
}

// Runs elements [i, i + count) of `p`, fewer than a step, through Body2 on a padded copy
// ([Note: identical tails]); `index`: element i's low 32 index bits. max0 / max1 are copies:
// the padding's lanes must not count.
template <OptimizerKind K, DType G, int O, StateDType S>
HWY_INLINE void PaddedStep(const Hoisted& k, const Arrays& p, size_t i, size_t count,
                           uint32_t index, VMax max0, VMax max1) {
  constexpr size_t kMaxLanes = 2 * HWY_MAX_BYTES / sizeof(float);
  HWY_ALIGN float master[kMaxLanes] = {};
  HWY_ALIGN uint8_t s_in[2][kMaxLanes * sizeof(float)] = {};
  HWY_ALIGN uint8_t s_out[2][kMaxLanes * sizeof(float)] = {};
  HWY_ALIGN uint8_t grad[kMaxLanes * sizeof(float)] = {};
  HWY_ALIGN uint8_t out[kMaxLanes * sizeof(float)] = {};
  const size_t grad_size = DTypeSize(G);
  constexpr size_t in_size = StateInBytes<S>(), out_size = StateOutBytes<S>();
  const void* const in[2] = {p.s0_in, p.s1_in};
  void* const dst[2] = {p.s0_out, p.s1_out};
  std::memcpy(master, p.master + i, count * sizeof(float));
  for (int s = 0; s < 2; ++s) {
    if (in[s] != nullptr) std::memcpy(s_in[s], At(in[s], i * in_size), count * in_size);
  }
  std::memcpy(grad, At(p.grad, i * grad_size), count * grad_size);
  const Arrays padded{master, s_in[0], s_in[1], s_out[0], s_out[1], grad, out};
  const DU du;
  Body2<K, G, O, S>(k, padded, 0, index, /*stream=*/false, max0, max1, hn::Zero(du),
                    hn::Zero(du));
  std::memcpy(p.master + i, master, count * sizeof(float));
  for (int s = 0; s < 2; ++s) {
    if (dst[s] != nullptr) std::memcpy(At(dst[s], i * out_size), s_out[s], count * out_size);
  }
  if constexpr (O != kParamNone) {
    const size_t param_size = DTypeSize(static_cast<DType>(O));
    std::memcpy(At(p.out, i * param_size), out, count * param_size);
  }
}

// Runs elements [0, n) of `p` through Body2: whole steps of two vectors, then the remainder
// through the padded step. With bf16 states the whole steps start at an index that is a
// multiple of the step, and go block by block of 2^16 indices, each with its hoisted keys
// ([Note: hashing within a 64K block]); the elements before that index take the padded step
// too. Each whole step first prefetches the inputs of the step k.prefetch elements ahead
// where that step lies within the first `in_range` elements of `p` (the kernel's range: int8
// states run one block at a time, and prefetch into the blocks after it). Returns where the
// whole steps end (int8 states, which start at index 0: the elements max0 / max1 cover).
template <OptimizerKind K, DType G, int O, StateDType S>
HWY_INLINE size_t Steps(const Hoisted& k, const Arrays& p, size_t n, uint32_t index_lo, VMax& max0,
                        VMax& max1, size_t in_range) {
  const DF df;
  const DU du;
  const size_t lanes = hn::Lanes(df);
  const size_t step = 2 * lanes;
  constexpr size_t kParamBytes = O == kParamNone ? 0 : DTypeSize(static_cast<DType>(O));
  [[maybe_unused]] const uint32_t below_step = static_cast<uint32_t>(step - 1);
  size_t i = 0;
  if constexpr (S == StateDType::kBF16) {
    i = std::min(n, size_t{(0u - index_lo) & below_step});
    if (i != 0) PaddedStep<K, G, O, S>(k, p, 0, i, index_lo, max0, max1);
  }
  const size_t whole = i + (n - i) / step * step;  // the end of the whole steps
  const size_t prefetching = PrefetchingEnd(k.prefetch, in_range, step);
  const bool stream = k.stream_out && StreamAligned(At(p.out, i * kParamBytes));
  if constexpr (S == StateDType::kBF16) {
    while (i < whole) {
      const uint32_t first = index_lo + static_cast<uint32_t>(i);  // a multiple of step
      const size_t end = std::min(whole, i + (size_t{0x10000} - (first & 0xffffu)));
      const uint32_t block_key = sr::SrBlockKey(sr::SrKey{k.sr_k1, k.sr_k2}, first >> 16);
      Hoisted in_block = k;
      in_block.sr_block_key = block_key & ~below_step;
      const VU low = hn::Set(du, block_key & below_step);
      const VU c1 = hn::Set(du, sr::kFmix32C1);
      const VU lane_a = hn::Mul(hn::Xor(hn::Iota(du, 0), low), c1);
      const VU lane_b = hn::Mul(hn::Xor(hn::Iota(du, static_cast<uint32_t>(lanes)), low), c1);
      for (; i < end; i += step) {
        if (i < prefetching) PrefetchInputs<G, S>(p, i + k.prefetch, step);
        Body2<K, G, O, S, true>(in_block, p, i, index_lo + static_cast<uint32_t>(i), stream,
                                max0, max1, lane_a, lane_b);
      }
    }
  } else {
    for (; i < whole; i += step) {
      if (i < prefetching) PrefetchInputs<G, S>(p, i + k.prefetch, step);
      Body2<K, G, O, S>(k, p, i, index_lo + static_cast<uint32_t>(i), stream, max0, max1,
                        hn::Zero(du), hn::Zero(du));
    }
  }
  if (i < n) {
    PaddedStep<K, G, O, S>(k, p, i, n - i, index_lo + static_cast<uint32_t>(i), max0, max1);
  }
  return whole;
}

// fp32 states in place and bf16 states in registers ([Note: fused bf16 states]).
template <OptimizerKind K, DType G, int O, StateDType S>
HWY_NOINLINE void Loop(const KernelConstants& c, const KernelRange& r) {
  const Hoisted k = MakeHoisted<K, S>(c, r);
  // The pointers are copied out of `r` for the same reason as Hoisted: stores may alias `r`.
  const Arrays p{r.master, r.state0, r.state1, r.state0, r.state1, r.grad, r.param_out};
  const DI di;
  VMax unused0 = hn::Zero(di), unused1 = hn::Zero(di);
  Steps<K, G, O, S>(k, p, static_cast<size_t>(r.n), r.index_lo, unused0, unused1,
                    static_cast<size_t>(r.n));
  if (k.stream_out) hwy::FlushStream();  // order the streamed stores before the step returns
}

// [Note: fused int8 states] int8 states are decoded in the loads (one scale per block of
// kQuantBlock), updated, written as fp32 into an L1 buffer of one block, and the block is then
// encoded by the codec's own EncodeInt8Block (int8_block-inl.h). A step so moves 1 byte per
// state each way plus the scales, and makes no decode pass over a scratch copy. The result is
// that of DecodeState, the fp32 kernel with root second moments, and EncodeState, bit for bit
// (the tests compare both paths). The range starts at a block boundary and has one weight
// decay; CpuOptimizer runs a block that straddles a segment boundary through the scratch.
template <OptimizerKind K, DType G, int O>
HWY_NOINLINE void LoopInt8(const KernelConstants& c, const KernelRange& r) {
  const DF df;
  Hoisted k = MakeHoisted<K, StateDType::kInt8>(c, r);
  constexpr int kStates = NumKernelStates<K>();
  const size_t n = static_cast<size_t>(r.n);
  const size_t grad_size = DTypeSize(G);
  const size_t param_size = O != kParamNone ? DTypeSize(static_cast<DType>(O)) : 0;
  float* const master = r.master;
  int8_t* const codes0 = static_cast<int8_t*>(r.state0);
  int8_t* const codes1 = static_cast<int8_t*>(r.state1);
  float* const scales0 = r.scale0;
  float* const scales1 = r.scale1;
  const void* const grad = r.grad;
  void* const param_out = r.param_out;
  HWY_ALIGN float block0[kQuantBlock];
  HWY_ALIGN float block1[kQuantBlock];
  for (size_t b = 0; b < n; b += kQuantBlock) {
    const size_t count = n - b < size_t{kQuantBlock} ? n - b : size_t{kQuantBlock};
    const size_t q = b / kQuantBlock;
    if (k.reads_s0) k.scale0 = scales0[q];
    if constexpr (kStates == 2) k.scale1 = scales1[q];
    const Arrays p{master + b,
                   At(codes0, b),
                   kStates == 2 ? At(codes1, b) : nullptr,
                   block0,
                   kStates == 2 ? block1 : nullptr,
                   At(grad, b * grad_size),
                   At(param_out, b * param_size)};
    // The block max of each state: from registers over the whole steps, then from the buffer
    // over the rest (an associative max, so the grouping does not matter).
    const DI di;
    VMax max0 = hn::Zero(di), max1 = hn::Zero(di);
    const size_t done = Steps<K, G, O, StateDType::kInt8>(k, p, count, 0, max0, max1, n - b);
    namespace q8 = int8q::HWY_NAMESPACE;
    const hn::CappedTag<float, 1> d1;
    if (k.writes_s0) {
      float max_abs = q8::MaxAbsOfLanes(df, max0);
      q8::MaxAbsLanes(d1, block0 + done, count - done, &max_abs);
      q8::EncodeInt8BlockWithMax(block0, count, max_abs, codes0 + b, scales0 + q);
    }
    if constexpr (kStates == 2) {
      float max_abs = q8::MaxAbsOfLanes(df, max1);
      q8::MaxAbsLanes(d1, block1 + done, count - done, &max_abs);
      q8::EncodeInt8BlockWithMax(block1, count, max_abs, codes1 + b, scales1 + q);
    }
  }
  if (k.stream_out) hwy::FlushStream();  // order the streamed stores before the step returns
}

template <OptimizerKind K, DType G, int O>
void DispatchStates(const KernelConstants& c, const KernelRange& r) {
  switch (r.state_dtype) {
    case StateDType::kF32:
      return Loop<K, G, O, StateDType::kF32>(c, r);
    case StateDType::kBF16:
      return Loop<K, G, O, StateDType::kBF16>(c, r);
    case StateDType::kInt8:
      return LoopInt8<K, G, O>(c, r);
  }
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
  static_cast<kernels::FusedStepConstants&>(c) =
      kernels::MakeFusedStepConstants(h.lr, h.beta1, h.beta2, h.eps, h.step, h.nesterov);
  c.kind = h.kind;
  return c;
}

void RunOptimizerKernel(const KernelConstants& c, const KernelRange& r) {
  if (r.n <= 0) return;
  HWY_DYNAMIC_DISPATCH(RunKernelImpl)(c, r);
}

const char* OptimizerKernelTarget() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace zs::internal
#endif  // HWY_ONCE
