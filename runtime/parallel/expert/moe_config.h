// MoeConfig: the shape and routing settings of a mixture-of-experts MLP (moe_mlp.h), and the
// two rules derived from them: which experts an expert-parallel rank holds, and the capacity.
//
// Contract
// - Plain values and pure functions; thread-safe.
// - Experts: E = num_experts over the whole expert-parallel group of n ranks; E % n == 0 and
//   rank r holds the E / n consecutive experts [r * E / n, (r + 1) * E / n).
// - Capacity (per expert, per source rank, per micro-batch): with T tokens on this rank,
//   capacity = ceil(k * T * capacity_factor / E), computed in double; a quotient within 1e-9
//   (relative) above an integer counts as that integer, so 1.1 * 10 tokens gives 11, not 12.
//   It is at most k * T (more could never be used; a huge factor stays representable). An
//   expert on its owner rank therefore receives at most n * capacity rows per micro-batch.
// - MoeRowBound: the most rows a layer's buffers can hold per micro-batch under that rule, when
//   every rank of the group has T tokens (the planner's bound; a full expert reaches it).
// - ValidateMoeConfig: InvalidArgument naming the values for hidden or ffn < 1, num_experts < 1,
//   top_k outside {1, 2}, top_k > num_experts, capacity_factor not finite or <= 0,
//   aux_loss_coef negative or not finite, ep_size < 1, num_experts not divisible by ep_size.
#pragma once

#include <cstdint>

#include "runtime/base/status.h"

namespace zs {

struct MoeConfig {
  int64_t hidden = 0;   // H: the token width
  int64_t ffn = 0;      // F: each expert's inner width (GPT: 4 * H)
  int num_experts = 0;  // E over the whole expert-parallel group
  int top_k = 2;        // 1 (Switch) or 2 (GShard, Mixtral)
  double capacity_factor = 1.25;
  float aux_loss_coef = 0.01f;  // Switch's alpha for the load-balancing loss
};

Status ValidateMoeConfig(const MoeConfig& config, int ep_size);

// min(ceil(k * tokens * capacity_factor / E), k * tokens), as above; 0 for 0 tokens.
int64_t ExpertCapacity(const MoeConfig& config, int64_t tokens);

struct MoeRows {
  // Kept (token, choice) rows of this rank's tokens (DispatchPlan::rows()):
  // min(k * T, E * capacity).
  int64_t dispatched = 0;
  // Rows this rank's L = E / n experts compute (ExpertExchange::Layout::rows), from n sources:
  // n * min(T * min(k, L), L * capacity) (a token sends each of its k choices once, to
  // distinct experts).
  int64_t received = 0;
};
// The bound above for `tokens` tokens on each of the `ep_size` ranks (config valid for it).
MoeRows MoeRowBound(const MoeConfig& config, int64_t tokens, int ep_size);

}  // namespace zs
