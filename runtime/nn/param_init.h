// Parameter metadata of runtime/nn modules and the seeded initialisation GPT-2 uses.
//
// Contract
// - A module exports, for each parameter it reads, a ModuleParam: the ParamSpec the model puts
//   in its UnitSpec (weight decay is metadata: true for Linear weights and embedding tables,
//   false for biases and LayerNorm gain/bias) and an InitKind saying how the model fills it.
// - FillNormal draws values that depend only on (seed, unit, param) and the element index:
//   a std::mt19937_64 (its output sequence is fixed by the standard) seeded by hashing the
//   three, turned into normals by a hand-written Box-Muller, so the bits do not depend on the
//   standard library's distributions.
// - Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/model/model_spec.h"

namespace zs::nn {

enum class InitKind : uint8_t {
  kZeros,           // biases
  kOnes,            // LayerNorm gains
  kNormal,          // weights and embeddings: normal(0, std)
  kNormalResidual,  // projections into the residual stream: normal(0, std / sqrt(2 * layers))
};

struct ModuleParam {
  ParamSpec spec;
  InitKind init = InitKind::kNormal;
};

// values[i] = stddev * N(0, 1), drawn from a generator keyed by (seed, unit, param).
void FillNormal(uint64_t seed, int unit, int param, float stddev, std::span<float> values);

}  // namespace zs::nn
