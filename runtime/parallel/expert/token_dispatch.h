// PlanDispatch: which row of an expert-grouped buffer each (token, choice) goes to, and which
// are dropped by the capacity rule. The plan behind a mixture-of-experts layer's dispatch
// (gather token rows by expert) and combine (scatter expert outputs back to tokens).
//
// Contract
// - Input: expert_of[t * k + j] is token t's j-th choice (j = 0 the router's first choice),
//   for tokens t in [0, tokens), j in [0, k). Every entry must lie in [0, num_experts).
// - The drop rule, deterministic and independent of the backend: expert e ranks the
//   assignments routed to it by (choice j, token t), all first choices in token order, then
//   all second choices in token order, and keeps the first `capacity` of them; the rest are
//   dropped. So a token's first choice is never dropped in favour of another token's second
//   choice, and among equals the earlier token wins (GShard's and Switch's priority order).
// - Output (a DispatchPlan): the kept assignments in expert order, each expert's rows
//   contiguous and ordered by the rule above; per-expert routed and kept counts; the exclusive
//   scan of the kept counts (each expert's first row); for each row the assignment it holds
//   (dispatch gathers token assignment[row] / k); for each assignment its row or -1 when
//   dropped (combine's inverse permutation).
// - Computed with Thrust: a stable sort of assignment indices by expert (enumerated choice-major,
//   which is what makes the sort order the priority order), a vectorized binary search for each
//   expert's range, a scan for the offsets and one scatter. PlanDispatch runs it on the calling
//   thread with Thrust's sequential C++ backend (thrust::cpp::par); token_dispatch_cuda.h runs
//   the same template on a GPU. Blocks until done; no state; thread-safe.
// - Errors (InvalidArgument naming the values): k < 1, num_experts < 1, capacity < 0,
//   expert_of.size() not a multiple of k or past INT32_MAX, an entry outside [0, num_experts).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/base/status.h"

namespace zs {

struct DispatchPlan {
  int64_t tokens = 0;
  int k = 0;
  int num_experts = 0;
  int64_t capacity = 0;
  std::vector<int32_t> routed;      // [E] assignments whose choice is e, before capacity
  std::vector<int32_t> kept;        // [E] min(routed[e], capacity)
  std::vector<int32_t> offsets;     // [E + 1] first row of expert e; offsets[E] == rows()
  std::vector<int32_t> assignment;  // [rows()] the assignment t * k + j that each row holds
  std::vector<int32_t> slot;        // [tokens * k] the row of assignment t * k + j, or -1

  int64_t rows() const { return offsets.empty() ? 0 : offsets.back(); }
  int64_t dropped() const { return tokens * k - rows(); }

  // A plan for `choices` = tokens * k assignments with its per-expert arrays and `slot` sized
  // (zeros) and `assignment` empty, for a planner to fill (the CPU and GPU planners share it).
  static DispatchPlan Sized(size_t choices, int k, int num_experts, int64_t capacity);
};

// `capacity` is the most rows one expert keeps; pass tokens * k (or more) to drop nothing.
StatusOr<DispatchPlan> PlanDispatch(std::span<const int32_t> expert_of, int k, int num_experts,
                                    int64_t capacity);

// The argument checks of PlanDispatch (and PlanDispatchCuda) for `choices` = tokens * k
// entries, without the per-entry range check.
Status CheckDispatchArgs(size_t choices, int k, int num_experts, int64_t capacity);

}  // namespace zs
