// Linear: y = x W^T + b, W [out, in], b [out]; explicit forward and backward on the CPU.
//
// Contract
// - Owns no parameters and no activations. Its parameters are params first_param (weight) and,
//   with a bias, first_param + 1 (bias) of unit `unit`, read through the UnitAccess passed in;
//   the caller holds the unit's bracket open (forward for Forward, backward for Backward).
// - x [rows, in] and y [rows, out] are row-major fp32 buffers owned by the caller. Backward
//   takes the x Forward got (the caller keeps it), writes dx [rows, in] (overwrites; may be
//   null when not needed) and accumulates (+=) dW and db into Grad().
// - GEMMs through Sgemm (OpenBLAS, one thread). Not thread-safe across calls on the same
//   UnitAccess (UnitAccess is one thread per rank).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/model/unit_access.h"
#include "runtime/nn/param_init.h"

namespace zs::nn {

class Linear {
 public:
  Linear(int unit, int first_param, int64_t in, int64_t out, bool bias = true,
         InitKind weight_init = InitKind::kNormal);

  int num_params() const { return bias_ ? 2 : 1; }
  // "<prefix>weight" [out, in] with weight decay, "<prefix>bias" [out] without.
  std::vector<ModuleParam> params(std::string_view prefix) const;

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }

  void Forward(UnitAccess& access, const float* x, int64_t rows, float* y) const;
  void Backward(UnitAccess& access, const float* x, const float* dy, int64_t rows, float* dx) const;

 private:
  int unit_;
  int first_param_;
  int64_t in_;
  int64_t out_;
  bool bias_;
  InitKind weight_init_;
};

}  // namespace zs::nn
