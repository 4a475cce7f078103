// Float64 references of every optimizer in optimizer_spec.h: the truth the SIMD and CUDA
// kernels are tested against (never on zeros: tests feed random inputs).
//
// Contract
// - ReferenceStep computes one update of n elements in double precision from fp32 inputs:
//   master, states (as float values, i.e. already decoded), a gradient given as float values
//   times grad_scale, and a per-element weight decay. It writes the new master and states as
//   doubles; tests compare the kernels' results with tolerances set by float rounding (fp32
//   states), bf16 rounding (bf16 states) or the block scale (int8 states).
// - Pure function; no threads, no allocation beyond its outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "optimizers/optimizer_spec.h"

namespace zs {

struct ReferenceState {
  std::vector<double> master;
  std::vector<double> state0;  // empty when the kind has no state 0
  std::vector<double> state1;  // empty when the kind has no state 1
};

ReferenceState ReferenceStep(const OptimizerHyper& hyper, const std::vector<float>& master,
                             const std::vector<float>& state0, const std::vector<float>& state1,
                             const std::vector<float>& grad, float grad_scale,
                             const std::vector<float>& weight_decay);

}  // namespace zs
