// One element of the fused optimizer step, as scalar `__host__ __device__` code: the CUDA
// kernel (kernels/cuda/fused_optimizer.cu) and its CPU reference (fused_optimizer_reference.cc)
// both run these functions, and they are written to give the bits of the SIMD CPU kernels
// (optimizers/optimizer_kernels.cc's Update): kernels_fused_optimizer_reference_test checks the
// reference against CpuOptimizer bit for bit (NaN payloads aside), and the GPU test the kernel
// against the reference.
//
// Contract
// - Plain IEEE float: every product and sum rounded on its own (compile with
//   -ffp-contract=off on the host and --fmad=false under nvcc: a fused multiply-add changes
//   the bits), exact-rounded division and square root, and the operation order of
//   optimizers/optimizer_kernels.cc's Update (AdamW / Adam: optimizers/adamw_reference.cc's).
// - FusedStepConstants are computed once per launch on the host (MakeFusedStepConstants), the
//   way optimizers/optimizer_kernels.cc's MakeKernelConstants computes them.
// - int8 blocks ([Note: int8 quantization] in optimizers/optimizer_spec.h): the block's scale
//   and codes from the largest |value| (compared as integer bits, so NaN orders above inf and
//   the max is the same in any order); Int8BlockCoder encodes one value of the block.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/float_bits.h"
#include "kernels/fused_optimizer_types.h"

namespace zs::kernels {

struct FusedStepConstants {
  float lr = 0.0f, beta1 = 0.0f, one_minus_beta1 = 0.0f, beta2 = 0.0f, one_minus_beta2 = 0.0f;
  float eps = 0.0f;
  float step_size = 0.0f;     // Adam: float(lr / (1 - beta1^step)), the bias correction in double
  float inv_sqrt_bc2 = 0.0f;  // Adam: float(1 / sqrt(1 - beta2^step))
  float grad_scale = 1.0f;
  bool sgd_momentum = false;    // SGD: beta1 != 0 (state0 present)
  bool sgd_first_step = false;  // SGD: step == 1 (buf = g)
  bool nesterov = false;
};

// The one computation of a step's constants: the SIMD CPU kernels' (optimizers/
// optimizer_kernels.cc's MakeKernelConstants) and the GPU kernel's, so their bits agree.
inline FusedStepConstants MakeFusedStepConstants(float lr, float beta1, float beta2, float eps,
                                                 int64_t step, bool nesterov) {
  FusedStepConstants c;
  c.lr = lr;
  c.beta1 = beta1;
  c.one_minus_beta1 = 1.0f - beta1;
  c.beta2 = beta2;
  c.one_minus_beta2 = 1.0f - beta2;
  c.eps = eps;
  // Bias corrections in double once per step, as optimizers/adamw_reference.cc does.
  const double bc1 = 1.0 - std::pow(double(beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(beta2), double(step));
  c.step_size = float(double(lr) / bc1);
  c.inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  c.sgd_momentum = beta1 != 0.0f;
  c.sgd_first_step = step == 1;
  c.nesterov = nesterov;
  return c;
}

inline FusedStepConstants MakeFusedStepConstants(const FusedOptimizerHyper& h) {
  FusedStepConstants c = MakeFusedStepConstants(h.lr, h.beta1, h.beta2, h.eps, h.step, h.nesterov);
  c.grad_scale = h.grad_scale;
  return c;
}

// The gradient times grad_scale (skipped at 1, as the CPU kernel skips it: same bits).
ZS_KERNEL_HD float ScaledGrad(const FusedStepConstants& c, float g) {
  return c.grad_scale != 1.0f ? g * c.grad_scale : g;
}

// How many states the kind updates (AdamW/Adam 2, else 1; SGD without momentum writes none).
template <FusedOptimizerKind K>
inline constexpr int kFusedNumStates =
    K == FusedOptimizerKind::kAdamW || K == FusedOptimizerKind::kAdam ? 2 : 1;

// Whether the kind reads / writes state0 this step (SGD reads none at its first step).
template <FusedOptimizerKind K>
ZS_KERNEL_HD bool ReadsState0(const FusedStepConstants& c) {
  return K != FusedOptimizerKind::kSgd || (c.sgd_momentum && !c.sgd_first_step);
}
template <FusedOptimizerKind K>
ZS_KERNEL_HD bool WritesState0(const FusedStepConstants& c) {
  return K != FusedOptimizerKind::kSgd || c.sgd_momentum;
}

// Updates one element: g is the scaled gradient, w the master, s0 / s1 the states' values (0
// where the kind reads none; second moments as roots when `as_root`), decay = 1 - lr * wd.
// Leaves the new weight in w and the values to store in s0, s1.
template <FusedOptimizerKind K>
ZS_KERNEL_HD void UpdateElement(const FusedStepConstants& c, float wd, float decay, bool as_root,
                                float g, float& w, float& s0, float& s1) {
  if constexpr (K == FusedOptimizerKind::kAdamW || K == FusedOptimizerKind::kAdam) {
    if constexpr (K == FusedOptimizerKind::kAdam) g = g + wd * w;
    const float m = c.beta1 * s0 + c.one_minus_beta1 * g;
    const float v_old = as_root ? s1 * s1 : s1;
    const float v = c.beta2 * v_old + (c.one_minus_beta2 * g) * g;
    const float root_v = sqrtf(v);
    s0 = m;
    s1 = as_root ? root_v : v;
    const float denom = root_v * c.inv_sqrt_bc2 + c.eps;
    if constexpr (K == FusedOptimizerKind::kAdamW) w = w * decay;
    w = w - (c.step_size * m) / denom;
  } else if constexpr (K == FusedOptimizerKind::kSgd) {
    g = g + wd * w;
    float update = g;
    if (c.sgd_momentum) {
      const float buf = c.sgd_first_step ? g : c.beta1 * s0 + g;
      s0 = buf;
      update = c.nesterov ? g + c.beta1 * buf : buf;
    }
    w = w - c.lr * update;
  } else if constexpr (K == FusedOptimizerKind::kAdagrad) {
    g = g + wd * w;
    const float s_old = as_root ? s0 * s0 : s0;
    const float s = s_old + g * g;
    const float root_s = sqrtf(s);
    s0 = as_root ? root_s : s;
    w = w - (c.lr * g) / (root_s + c.eps);
  } else {  // Lion
    const float m = s0;
    w = w * decay;
    const float mix = c.beta1 * m + c.one_minus_beta1 * g;
    const float sign = mix > 0.0f ? 1.0f : (mix < 0.0f ? -1.0f : 0.0f);  // 0 for 0 and NaN
    w = w - c.lr * sign;
    s0 = c.beta2 * m + c.one_minus_beta2 * g;
  }
}

// ---- int8 blocks ------------------------------------------------------------------------------

ZS_KERNEL_HD float DecodeInt8(int8_t code, float scale) { return float(int32_t(code)) * scale; }

// |x| as integer bits: the block max is the max of these (NaN above inf, order-independent).
ZS_KERNEL_HD uint32_t AbsBits(float x) { return FloatToBits(x) & 0x7fffffffu; }

// The coder of one block whose largest |value| has the bits `max_abs_bits`.
struct Int8BlockCoder {
  float scale;         // max |x| / 127: the block's stored scale
  float inv;           // 127 / max |x|
  bool by_reciprocal;  // code = rne(x * inv); else rne(x / scale) clamped (tiny or non-finite)
};

ZS_KERNEL_HD Int8BlockCoder MakeInt8BlockCoder(uint32_t max_abs_bits) {
  const float max_abs = BitsToFloat(max_abs_bits);
  Int8BlockCoder c{};
  c.scale = max_abs / 127.0f;
  c.inv = 127.0f / max_abs;
  c.by_reciprocal = c.inv <= 3.0e38f && max_abs <= 3.4028235e38f;
  return c;
}

// One value's code. Zero blocks (scale 0) give 0. |x * inv| < 127.5, and adding 1.5 * 2^23
// rounds it to an integer (ties to even) held in the low mantissa bits. The division path
// clamps to [-127, 127], NaN to -127 (x86's max(NaN, -127) returns -127, as fmaxf does).
ZS_KERNEL_HD int8_t EncodeInt8(const Int8BlockCoder& c, float x) {
  if (c.scale == 0.0f) return 0;
  if (c.by_reciprocal) {
    const float y = x * c.inv;
    const float rounded = y + 12582912.0f;
    return int8_t(uint8_t(FloatToBits(rounded) & 0xffu));
  }
  const float q = rintf(x / c.scale);
  return int8_t(int32_t(fminf(fmaxf(q, -127.0f), 127.0f)));
}

}  // namespace zs::kernels
