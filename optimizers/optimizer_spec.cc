#include "optimizers/optimizer_spec.h"

namespace zs {

std::string_view OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdamW: return "AdamW";
    case OptimizerKind::kAdam: return "Adam";
    case OptimizerKind::kSgd: return "SGD";
    case OptimizerKind::kAdagrad: return "Adagrad";
    case OptimizerKind::kLion: return "Lion";
  }
  return "?";
}

std::string_view StateDTypeName(StateDType t) {
  switch (t) {
    case StateDType::kF32: return "fp32";
    case StateDType::kBF16: return "bf16";
    case StateDType::kInt8: return "int8";
  }
  return "?";
}

}  // namespace zs
