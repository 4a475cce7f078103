// Mlp: the transformer feed-forward block, y = proj(gelu(fc(x))), fc H -> 4H, proj 4H -> H.
//
// Contract
// - Owns no parameters: params first_param .. first_param + 3 of unit `unit` are fc.weight,
//   fc.bias, proj.weight, proj.bias (read inside the caller's bracket).
// - Owns the activations its forward creates (fc output and GELU output) until the next
//   Forward; Backward must follow a Forward, takes the same x, writes dx [rows, H]
//   (overwrites) and accumulates (+=) parameter gradients. One thread at a time per object.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/model/unit_access.h"
#include "runtime/nn/linear.h"

namespace zs::nn {

class Mlp {
 public:
  Mlp(int unit, int first_param, int64_t hidden);

  int num_params() const { return fc_.num_params() + proj_.num_params(); }
  // "<prefix>fc.{weight,bias}", "<prefix>proj.{weight,bias}"; proj.weight is a residual
  // projection (InitKind::kNormalResidual).
  std::vector<ModuleParam> params(std::string_view prefix) const;

  void Forward(UnitAccess& access, const float* x, int64_t rows, float* y);
  void Backward(UnitAccess& access, const float* x, const float* dy, float* dx);

  int64_t activation_bytes() const;

 private:
  int64_t hidden_;
  Linear fc_;
  Linear proj_;
  int64_t rows_ = 0;
  std::vector<float> pre_;   // fc output [rows, 4H]
  std::vector<float> act_;   // gelu(pre_) [rows, 4H]
  std::vector<float> dact_;  // backward scratch [rows, 4H]
};

}  // namespace zs::nn
