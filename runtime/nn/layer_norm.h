// LayerNorm over the last dimension: y = (x - mean) * rstd * gain + bias, eps 1e-5.
//
// Contract
// - Owns no parameters and no activations: gain and bias are params first_param and
//   first_param + 1 of unit `unit` (read inside the caller's bracket). x, y [rows, dim] and the
//   per-row statistics mean, rstd [rows] are the caller's; Forward writes y, mean and rstd and
//   Backward reads them back with the same x, writes dx (overwrites) and accumulates (+=) the
//   gain and bias gradients.
// - LayerNormForward / LayerNormBackward are the same math on raw pointers (no UnitAccess), for
//   layers that hold the gradients elsewhere first (runtime/parallel/tensor sums a sequence-
//   parallel LayerNorm's gradients over the tp group before adding them).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/model/unit_access.h"
#include "runtime/nn/param_init.h"

namespace zs::nn {

// y = (x - mean) * rstd * gain + bias per row of x [rows, dim]; writes y, mean, rstd.
void LayerNormForward(const float* x, const float* gain, const float* bias, int64_t rows,
                      int64_t dim, float* y, float* mean, float* rstd);
// Writes dx (overwrites) and accumulates (+=) dgain and dbias [dim].
void LayerNormBackward(const float* x, const float* mean, const float* rstd, const float* gain,
                       const float* dy, int64_t rows, int64_t dim, float* dx, float* dgain,
                       float* dbias);

class LayerNorm {
 public:
  static constexpr float kEps = 1e-5f;

  LayerNorm(int unit, int first_param, int64_t dim);

  int num_params() const { return 2; }
  // "<prefix>weight" (gain, ones) and "<prefix>bias" (zeros) [dim], both without weight decay.
  std::vector<ModuleParam> params(std::string_view prefix) const;

  int64_t dim() const { return dim_; }

  void Forward(UnitAccess& access, const float* x, int64_t rows, float* y, float* mean,
               float* rstd) const;
  void Backward(UnitAccess& access, const float* x, const float* mean, const float* rstd,
                const float* dy, int64_t rows, float* dx) const;

 private:
  int unit_;
  int first_param_;
  int64_t dim_;
};

}  // namespace zs::nn
