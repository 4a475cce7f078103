#include "runtime/parallel/expert/moe_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace zs {

Status ValidateMoeConfig(const MoeConfig& c, int ep_size) {
  if (c.hidden < 1 || c.ffn < 1) {
    return InvalidArgumentError(
        fmt::format("MoE: hidden={} and ffn={} must both be >= 1", c.hidden, c.ffn));
  }
  if (c.top_k != 1 && c.top_k != 2) {
    return InvalidArgumentError(fmt::format("MoE: top_k={} is not 1 or 2", c.top_k));
  }
  if (c.num_experts < c.top_k) {
    return InvalidArgumentError(
        fmt::format("MoE: num_experts={} must be >= 1 and >= top_k={}", c.num_experts, c.top_k));
  }
  if (!std::isfinite(c.capacity_factor) || c.capacity_factor <= 0) {
    return InvalidArgumentError(
        fmt::format("MoE: capacity_factor={} must be finite and > 0", c.capacity_factor));
  }
  if (!std::isfinite(c.aux_loss_coef) || c.aux_loss_coef < 0) {
    return InvalidArgumentError(
        fmt::format("MoE: aux_loss_coef={} must be finite and >= 0", c.aux_loss_coef));
  }
  if (ep_size < 1 || c.num_experts % ep_size != 0) {
    return InvalidArgumentError(
        fmt::format("MoE: num_experts E={} is not divisible by the expert-parallel size n={}",
                    c.num_experts, ep_size));
  }
  return OkStatus();
}

int64_t ExpertCapacity(const MoeConfig& c, int64_t tokens) {
  const double q = double(c.top_k) * double(tokens) * c.capacity_factor / double(c.num_experts);
  if (q >= double(c.top_k) * double(tokens)) return int64_t(c.top_k) * tokens;  // drops nothing
  const double below = std::floor(q);
  if (q - below <= 1e-9 * q) return int64_t(below);
  return int64_t(std::ceil(q));
}

MoeRows MoeRowBound(const MoeConfig& c, int64_t tokens, int ep_size) {
  const int64_t capacity = ExpertCapacity(c, tokens);
  const int64_t k = c.top_k, experts = c.num_experts, local = experts / ep_size;
  MoeRows rows;
  rows.dispatched = std::min(k * tokens, experts * capacity);
  rows.received = ep_size * std::min(tokens * std::min(k, local), local * capacity);
  return rows;
}

}  // namespace zs
