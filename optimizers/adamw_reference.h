// AdamW (and Adam) on one contiguous range of a shard, in plain scalar float: the baseline the
// SIMD kernels (cpu_optimizer.h) are checked against bit for bit where the compiler does not
// contract to FMA. The engine steps with CpuOptimizer.
//
// Contract
// - Updates n elements in place: the fp32 master weights, the first and second moments (fp32),
//   from a gradient stored as `grad_dtype` multiplied by `grad_scale` (the engine folds loss
//   unscaling and clipping into it). Optionally writes the updated weights rounded to
//   `param_dtype` into `param_out` (the compute copy); null skips it.
// - Math (PyTorch's AdamW / Adam, in float, bias corrections computed in double once):
//     g = grad * grad_scale;                      Adam with decay: g += weight_decay * w
//     m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
//     AdamW: w = w * (1 - lr * weight_decay)
//     w = w - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bc_i = 1 - beta_i^step
//   The same inputs give the same bits on every call: an element's result depends only on
//   that element (so sharded and unsharded runs agree bit for bit).
// - `step` counts optimizer steps from 1. No allocation, no threads; pure function of its inputs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/base/dtype.h"

namespace zs {

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // 0 for parameters whose spec has weight_decay == false
  bool decoupled = true;      // true: AdamW; false: Adam (decay added to the gradient)
  int64_t step = 1;
};

void AdamWReferenceStep(const AdamWHyper& hyper, float* master, float* exp_avg, float* exp_avg_sq,
                        const void* grad, DType grad_dtype, float grad_scale, void* param_out,
                        DType param_dtype, size_t n);

}  // namespace zs
