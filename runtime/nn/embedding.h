// Embedding: a table [num, dim]; y[i] = table[ids[i]]; backward scatter-adds dy into the
// table's gradient.
//
// Contract
// - Owns no parameters: the table is param `param` of unit `unit`, read through the
//   UnitAccess inside the caller's bracket. Ids out of [0, num) are a ZS_CHECK failure: the
//   model validates user tokens before it opens any bracket.
// - y [ids.size(), dim] is the caller's; Forward overwrites it, or adds to it with
//   accumulate = true (token + position embeddings). Backward accumulates (+=) into Grad().
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/model/unit_access.h"
#include "runtime/nn/param_init.h"

namespace zs::nn {

class Embedding {
 public:
  Embedding(int unit, int param, int64_t num, int64_t dim);

  int num_params() const { return 1; }
  // "<prefix>weight" [num, dim], with weight decay.
  std::vector<ModuleParam> params(std::string_view prefix) const;

  int64_t num() const { return num_; }
  int64_t dim() const { return dim_; }

  void Forward(UnitAccess& access, std::span<const int32_t> ids, float* y,
               bool accumulate = false) const;
  void Backward(UnitAccess& access, std::span<const int32_t> ids, const float* dy) const;

 private:
  int unit_;
  int param_;
  int64_t num_;
  int64_t dim_;
};

}  // namespace zs::nn
