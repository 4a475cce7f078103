// ZeroMemoryModel: what the ZeRO paper's formulas say one rank holds for parameters, gradients
// and optimizer states, so reports can print, beside a measured run, what the other stages
// would need for the same model.
//
// Contract
// - Pure arithmetic. psi = parameters of the model, world = data-parallel ranks, compute_bytes =
//   2 for bf16/fp16 (4 for fp32), optimizer_bytes = 12 for Adam's fp32 master + two moments.
//   Stage 0: (c + c + K) psi; 1: 2c psi + K psi / N; 2: c psi + (c + K) psi / N;
//   3: (2c + K) psi / N. Padding, buckets and gathered units are not included (the engine
//   accounts them in their own categories). ZeroGridFormulaBytes adds the tp and pp factors.
#pragma once

#include <cstdint>

namespace zs {

struct ZeroStateBytes {
  double parameters = 0;
  double gradients = 0;
  double optimizer_states = 0;
  double total() const { return parameters + gradients + optimizer_states; }
};

inline ZeroStateBytes ZeroFormulaBytes(int stage, double psi, int world, double compute_bytes = 2,
                                       double optimizer_bytes = 12) {
  const double n = double(world);
  ZeroStateBytes b;
  b.parameters = compute_bytes * psi / (stage >= 3 ? n : 1.0);
  b.gradients = compute_bytes * psi / (stage >= 2 ? n : 1.0);
  b.optimizer_states = optimizer_bytes * psi / (stage >= 1 ? n : 1.0);
  return b;
}

// On a tp x pp x dp grid: each model-parallel rank holds about psi / (tp * pp) parameters
// (Megatron's split; replicated LayerNorm parameters and uneven pipeline stages make the real
// share differ a little), sharded over its dp group as above.
inline ZeroStateBytes ZeroGridFormulaBytes(int stage, double psi, int tp, int pp, int dp,
                                           double compute_bytes = 2, double optimizer_bytes = 12) {
  return ZeroFormulaBytes(stage, psi / double(tp * pp), dp, compute_bytes, optimizer_bytes);
}

}  // namespace zs
