// ExpertExchange: moves token rows between the ranks of an expert-parallel group, from the
// dispatch plan's order on each source rank to an expert-major order on each expert's owner,
// and back. The all-to-all half of a mixture-of-experts layer (moe_mlp.h); no math.
//
// Contract
// - Group: `ep` of n ranks (nullptr means one rank holding every expert: no communication,
//   the moves are copies). Rank r owns the L = E / n experts [r * L, (r + 1) * L) (moe_config.h).
//   The communicator is borrowed, and used from the calling thread only.
// - Exchange() is collective: every rank of `ep` calls it with its own plan (same E), in the
//   same order as its other operations on `ep`. It sends each expert's kept count to the owner
//   (an even all-to-all of L f32 counts per peer, exact below 2^24) and returns the Layout:
//     source side  the plan's rows [plan.offsets[q * L], plan.offsets[(q + 1) * L]) go to q;
//     expert side  block (s, le) = the rows source s sends to local expert le. The receive
//                  buffer of the all-to-all is source-major (s, le); the expert-major buffer
//                  that the experts compute on is (le, s): local expert le's rows contiguous,
//                  from source 0 first, each source's rows in its plan order.
// - ToExperts() / FromExperts() are collective too (one uneven all-to-all each): ToExperts
//   moves plan-order rows [plan.rows(), width] to the expert-major buffer [layout.rows, width];
//   FromExperts moves expert-major rows back to plan order (the inverse permutation). Both
//   block until their all-to-all finished; buffers are caller-owned and may not overlap.
// - Errors: the communicator's (returned with context naming the step), and InvalidArgument
//   when a count reaches 2^24 (not exact as f32). After an error the group is broken
//   (communicator.h); the layer reports it to its caller.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/parallel/expert/token_dispatch.h"

namespace zs {

class ExpertExchange {
 public:
  struct Layout {
    int ranks = 1;
    int local_experts = 0;  // L
    // Source side, per destination rank q.
    std::vector<int64_t> send_rows, send_first;  // [n]
    // Expert side, per block (s, le) at index s * L + le.
    std::vector<int64_t> block_rows;    // [n * L]
    std::vector<int64_t> recv_first;    // [n * L] first row in the source-major receive buffer
    std::vector<int64_t> expert_first;  // [n * L] first row in the expert-major buffer
    std::vector<int64_t> expert_begin;  // [L + 1] local expert le's rows in the expert-major buffer
    int64_t rows = 0;                   // rows received, all local experts together
  };

  // ep may be null (one rank). Experts: E = num_experts, divisible by ep's size (checked by
  // the layer, ZS_CHECKed here).
  ExpertExchange(Communicator* ep, int num_experts);

  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  int local_experts() const { return local_experts_; }

  StatusOr<Layout> Exchange(const DispatchPlan& plan) const;
  Status ToExperts(const Layout& layout, const float* plan_rows, int64_t width,
                   float* expert_rows) const;
  Status FromExperts(const Layout& layout, const float* expert_rows, int64_t width,
                     float* plan_rows) const;

 private:
  // One uneven all-to-all of rows: counts in rows per peer, converted to elements.
  Status MoveRows(const float* send, const std::vector<int64_t>& send_rows,
                  const std::vector<int64_t>& send_first, float* recv,
                  const std::vector<int64_t>& recv_rows, const std::vector<int64_t>& recv_first,
                  int64_t width, const char* step) const;

  Communicator* ep_;
  int ranks_;
  int rank_;
  int num_experts_;
  int local_experts_;
};

}  // namespace zs
