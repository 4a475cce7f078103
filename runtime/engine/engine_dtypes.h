// What an EngineConfig means for the arrays the engine keeps: the compute dtype, the optimizer
// states' dtype and the optimizer kind. One definition for the engine (zero_engine.cc) and for
// what mirrors its allocations (runtime/plan), so the two cannot drift apart.
//
// Contract
// - Pure inline functions of the config; any thread.
#pragma once

#include "optimizers/optimizer_spec.h"
#include "runtime/base/dtype.h"
#include "runtime/engine/engine_config.h"

namespace zs {

// bf16.enabled / fp16.enabled, else fp32.
inline DType ComputeDTypeOf(const EngineConfig& config) {
  if (config.bf16.enabled) return DType::kBF16;
  if (config.fp16.enabled) return DType::kF16;
  return DType::kF32;
}

// zerostack.optimizer_state_dtype.
inline StateDType OptimizerStateDTypeOf(const EngineConfig& config) {
  switch (config.zerostack.optimizer_state_dtype) {
    case OptimizerStateType::kF32:
      return StateDType::kF32;
    case OptimizerStateType::kBF16:
      return StateDType::kBF16;
    case OptimizerStateType::kInt8:
      return StateDType::kInt8;
  }
  return StateDType::kF32;
}

// optimizer.type, with DeepSpeed's "Adam" decoupling weight decay in adam_w_mode.
inline OptimizerKind OptimizerKindOf(const OptimizerConfig& o) {
  switch (o.type) {
    case OptimizerType::kAdamW:
      return OptimizerKind::kAdamW;
    case OptimizerType::kAdam:
      return o.adam_w_mode ? OptimizerKind::kAdamW : OptimizerKind::kAdam;
    case OptimizerType::kSgd:
      return OptimizerKind::kSgd;
    case OptimizerType::kAdagrad:
      return OptimizerKind::kAdagrad;
    case OptimizerType::kLion:
      return OptimizerKind::kLion;
  }
  return OptimizerKind::kAdamW;
}

// The first-moment (or SGD momentum) factor that decides how many states the optimizer keeps.
inline float OptimizerMomentumOf(const OptimizerConfig& o) {
  return float(o.type == OptimizerType::kSgd ? o.momentum : o.betas[0]);
}

}  // namespace zs
