// MoeMlp: a mixture-of-experts MLP with a top-k router, a capacity limit, the Switch load-
// balancing loss, and experts spread over an expert-parallel group with all-to-all dispatch and
// combine; explicit forward and backward on the CPU, as runtime/nn's modules.
//
//   probs  = softmax(x Wr^T)                         router Wr [E, H], no bias, replicated
//   top-k  = the k largest probs of each token (ties: the lower expert index), k in {1, 2}
//   gates  = k = 1: the chosen prob (Switch); k = 2: the two probs renormalized to sum to 1
//            (GShard, Mixtral); a dropped choice keeps its share (the other gate is not raised)
//   y[t]   = sum over t's kept choices j of gate[t, j] * expert_{e(t, j)}(x[t])
//   expert = proj(gelu(fc(x))), fc [F, H] + bias, GELU (tanh), proj [H, F] + bias
//   aux    = aux_loss_coef * E * sum_e f_e * P_e, f_e the fraction of tokens whose first choice
//            is e, P_e the mean router prob of e over the tokens (Switch Transformer, eq. 4)
// Capacity (moe_config.h): each expert keeps at most ceil(k * T * capacity_factor / E) of this
// rank's T tokens per micro-batch, chosen by token_dispatch.h's rule (first choices before
// second choices, then token order). A dropped (token, choice) contributes zero; a token with
// every choice dropped gets y[t] = 0 and reaches the next layer through the caller's residual.
//
// Contract
// - Owns no parameters. They are params first_param .. first_param + num_params() - 1 of unit
//   `unit`, in the order of params(): "<prefix>router.weight" [E, H], then for each expert e
//   this rank holds, in global order, "<prefix>experts.<e>.fc.weight" [F, H], "...fc.bias" [F],
//   "...proj.weight" [H, F], "...proj.bias" [H] (prefix "moe." by default). The router is the
//   same on every ep rank (its gradient is each rank's own tokens' part: sum it over the ranks
//   that share the router, as data parallelism does); expert e lives on rank e / (E / n) only.
//   They are read through UnitAccess Param()/Grad() inside the caller's bracket of `unit`
//   (forward bracket for Forward, backward bracket for Backward).
// - Owns no activations: Forward fills a caller-owned MoeActivations, Backward reads it, so
//   several micro-batches can be in flight (one MoeActivations each). x [T, H], y [T, H],
//   dy [T, H] and dx [T, H] are row-major fp32 buffers of the caller; Backward takes the x that
//   Forward got, writes dx (overwrites) and accumulates (+=) parameter gradients. y and dx may
//   not alias x or dy.
// - Loss: the objective is the caller's loss plus aux_loss() of every micro-batch's
//   activations; Backward seeds the aux loss's gradient with access.backward_scale(), as
//   runtime/nn's cross-entropy does, and dy carries the rest.
// - Expert parallelism: `ep` (borrowed, may be null: one rank holding all E experts) has n
//   ranks; rank r holds experts [r * E / n, (r + 1) * E / n). Forward and Backward are
//   collective over ep: every rank calls them for the same micro-batches in the same order
//   (T may differ between ranks, also 0). Forward makes three all-to-alls (per-expert counts,
//   token rows to the experts, outputs back), Backward two (output gradients to the experts,
//   input gradients back). They block the calling thread until done.
// - Determinism: routing, drops and every sum have a fixed order; the same inputs give the
//   same bits, at any n for the routing and drops. Across n the results agree to float
//   rounding (an expert's GEMMs see different row counts).
// - Errors: Create returns ValidateMoeConfig's errors (E not divisible by n, k outside {1, 2},
//   capacity_factor <= 0, ...). Forward/Backward return the communicator's errors with context
//   (the group is then broken, communicator.h); Backward without a successful Forward into
//   the same activations is a ZS_CHECK failure.
// - Threads: one thread per rank calls Forward/Backward (as UnitAccess and Communicator say);
//   a MoeMlp is immutable after Create and may be shared by the micro-batches of that thread.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/unit_access.h"
#include "runtime/nn/linear.h"
#include "runtime/nn/param_init.h"
#include "runtime/parallel/expert/expert_exchange.h"
#include "runtime/parallel/expert/moe_config.h"
#include "runtime/parallel/expert/token_dispatch.h"

namespace zs {

class MoeMlp;

// One micro-batch's activations of a MoeMlp: written by Forward, read by Backward.
class MoeActivations {
 public:
  int64_t tokens() const { return tokens_; }
  // The load-balancing loss of this micro-batch (already times aux_loss_coef).
  float aux_loss() const { return aux_loss_; }
  std::span<const int32_t> expert_of() const { return expert_of_; }  // [T, k] global experts
  std::span<const float> gates() const { return gates_; }            // [T, k]
  std::span<const float> probs() const { return probs_; }            // [T, E]
  const DispatchPlan& plan() const { return plan_; }                 // this rank's tokens
  int64_t expert_rows() const { return layout_.rows; }  // rows this rank's experts computed
  int64_t bytes() const;                                // what the vectors hold
  // bytes() after a Forward of `tokens` tokens that kept `rows` of them (rows.dispatched) and
  // computed rows.received on this rank's experts (MoeRowBound gives the most), on fresh
  // vectors: the planner's figure (runtime/plan), kept beside the vectors it counts.
  static int64_t BytesAfterForward(const MoeConfig& config, int64_t tokens, MoeRows rows);

 private:
  friend class MoeMlp;
  bool forward_done_ = false;
  int64_t tokens_ = 0;
  float aux_loss_ = 0.0f;
  std::vector<float> probs_;           // [T, E] softmax of the router logits
  std::vector<int32_t> expert_of_;     // [T, k]
  std::vector<float> gates_;           // [T, k]
  std::vector<float> first_fraction_;  // [E] f_e
  DispatchPlan plan_;
  ExpertExchange::Layout layout_;
  std::vector<float> expert_in_;  // [R, H] expert-major rows this rank's experts got
  std::vector<float> pre_;        // [R, F] fc outputs
  std::vector<float> act_;        // [R, F] gelu(pre_)
  std::vector<float> combined_;   // [plan rows, H] expert outputs back in plan order
};

class MoeMlp {
 public:
  static StatusOr<MoeMlp> Create(int unit, int first_param, const MoeConfig& config,
                                 Communicator* ep);

  const MoeConfig& config() const { return config_; }
  int num_params() const { return 1 + 4 * local_experts(); }
  int local_experts() const { return exchange_.local_experts(); }
  int first_expert() const { return exchange_.rank() * local_experts(); }  // global index
  std::vector<nn::ModuleParam> params(std::string_view prefix = "moe.") const;

  Status Forward(UnitAccess& access, const float* x, int64_t tokens, float* y,
                 MoeActivations& act) const;
  Status Backward(UnitAccess& access, const float* x, const float* dy, float* dx,
                  MoeActivations& act) const;

 private:
  MoeMlp(int unit, int first_param, const MoeConfig& config, Communicator* ep);

  // probs_ holds the router logits; turns them into probs, picks top-k, gates and f_e.
  void Route(MoeActivations& a) const;

  MoeConfig config_;
  ExpertExchange exchange_;
  nn::Linear router_;
  std::vector<nn::Linear> fc_;    // [L]
  std::vector<nn::Linear> proj_;  // [L]
};

}  // namespace zs
