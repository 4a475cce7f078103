#include "kernels/fused_optimizer_types.h"

namespace zs::kernels {

const char* FusedOptimizerArgsError(const FusedOptimizerHyper& h,
                                    const FusedOptimizerTensor* tensors, size_t num_tensors) {
  if (uint8_t(h.kind) > uint8_t(FusedOptimizerKind::kLion)) return "unknown optimizer kind";
  if (uint8_t(h.grad_type) > uint8_t(FusedGradType::kF16)) return "unknown gradient type";
  if (uint8_t(h.param_type) > uint8_t(FusedParamType::kF16)) return "unknown param_out type";
  if (uint8_t(h.state_type) > uint8_t(FusedStateType::kInt8)) return "unknown state type";
  if (h.step < 1) return "step must be >= 1";
  if (num_tensors > 0 && tensors == nullptr) return "null tensor list";
  const bool int8 = h.state_type == FusedStateType::kInt8;
  for (size_t i = 0; i < num_tensors; ++i) {
    const FusedOptimizerTensor& t = tensors[i];
    if (t.n == 0) continue;
    if (t.master == nullptr) return "a tensor has a null master";
    if (t.grad == nullptr) return "a tensor has a null grad";
    if (h.state_type == FusedStateType::kBF16 && t.n > (uint64_t{1} << 32)) {
      return "a bf16-state tensor has more than 2^32 elements";
    }
    if (FusedNeedsState0(h) && (t.state0 == nullptr || (int8 && t.state0_scales == nullptr))) {
      return "a tensor lacks state0 (or its int8 scales), which the kind needs";
    }
    if (FusedNeedsState1(h) && (t.state1 == nullptr || (int8 && t.state1_scales == nullptr))) {
      return "a tensor lacks state1 (or its int8 scales), which the kind needs";
    }
  }
  return nullptr;
}

}  // namespace zs::kernels
