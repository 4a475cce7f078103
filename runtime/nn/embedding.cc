#include "runtime/nn/embedding.h"

#include <string>

namespace zs::nn {

Embedding::Embedding(int unit, int param, int64_t num, int64_t dim)
    : unit_(unit), param_(param), num_(num), dim_(dim) {}

std::vector<ModuleParam> Embedding::params(std::string_view prefix) const {
  return {{ParamSpec{std::string(prefix) + "weight", {num_, dim_}, true}, InitKind::kNormal}};
}

void Embedding::Forward(UnitAccess& access, std::span<const int32_t> ids, float* y,
                        bool accumulate) const {
  const float* table = access.Param(unit_, param_).data();
  for (size_t i = 0; i < ids.size(); ++i) {
    ZS_CHECK(ids[i] >= 0 && ids[i] < num_, "embedding id {} at {} is not in [0, {})", ids[i], i,
             num_);
    const float* row = table + ids[i] * dim_;
    float* yi = y + static_cast<int64_t>(i) * dim_;
    if (accumulate) {
      for (int64_t j = 0; j < dim_; ++j) yi[j] += row[j];
    } else {
      for (int64_t j = 0; j < dim_; ++j) yi[j] = row[j];
    }
  }
}

void Embedding::Backward(UnitAccess& access, std::span<const int32_t> ids, const float* dy) const {
  float* grad = access.Grad(unit_, param_).data();
  for (size_t i = 0; i < ids.size(); ++i) {
    ZS_CHECK(ids[i] >= 0 && ids[i] < num_, "embedding id {} at {} is not in [0, {})", ids[i], i,
             num_);
    float* row = grad + ids[i] * dim_;
    const float* dyi = dy + static_cast<int64_t>(i) * dim_;
    for (int64_t j = 0; j < dim_; ++j) row[j] += dyi[j];
  }
}

}  // namespace zs::nn
