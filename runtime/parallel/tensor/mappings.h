// The communication between tensor-parallel regions (Megatron's f and g, and their sequence-
// parallel forms), as explicit forward and backward steps on caller-owned fp32 buffers.
//
//   mapping                              forward                  backward
//   copy-to-tp-region (f)                identity                 all-reduce (sum) of dx
//   reduce-from-tp-region (g)            all-reduce (sum) of y    identity
//   gather-from-sequence-region          all-gather row blocks    reduce-scatter (sum) of dx
//   reduce-scatter-to-sequence-region    reduce-scatter (sum)     all-gather row blocks
//
// The identities have no function. A sequence-region activation is this rank's contiguous
// block of rows/tp rows of the full [rows, H] activation (tp_options.h, [Note: tp activations]);
// "full" buffers hold all rows, "local" ones this rank's block, so full.size() = tp *
// local.size().
//
// Contract
// - Collectives of the tp communicator, blocking the calling thread until they complete; every
//   tp rank must make the same calls in the same order with the same sizes (communicator.h).
//   Sums are the communicator's deterministic rank-order sums (ReduceOp::kSum), so every rank
//   gets the same bits.
// - Errors: InvalidArgument naming the sizes and the group when full is not tp * local;
//   communication errors as the communicator returns them, with the mapping's name prefixed.
// - AccumulateReplicatedGrads: the gradient of a replicated parameter (tensor_parallel = false)
//   used inside a sequence region (LayerNorm gains and biases, a row-parallel bias, the position
//   embedding) is only a partial sum over this rank's rows under sequence parallelism. It sums
//   `partial` over the tp group in place (sequence_parallel) and adds it to `grad`, so every tp
//   rank accumulates the same full gradient, as Megatron's sequence-parallel gradient
//   all-reduce does. Without sequence parallelism it only adds (every rank saw all rows).
//   Several parameters' partials may share one buffer (one all-reduce): partial is the
//   concatenation of the grads' partial sums, in order.
#pragma once

#include <initializer_list>
#include <span>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"

namespace zs::tp {

// f backward, g forward: sum `values` over the tp group, in place.
Status CopyToTpRegionBackward(Communicator& tp, std::span<float> dx);
Status ReduceFromTpRegionForward(Communicator& tp, std::span<float> y);

Status GatherFromSequenceRegionForward(Communicator& tp, std::span<const float> local,
                                       std::span<float> full);
Status GatherFromSequenceRegionBackward(Communicator& tp, std::span<const float> dfull,
                                        std::span<float> dlocal);
Status ReduceScatterToSequenceRegionForward(Communicator& tp, std::span<const float> full,
                                            std::span<float> local);
Status ReduceScatterToSequenceRegionBackward(Communicator& tp, std::span<const float> dlocal,
                                             std::span<float> dfull);

// grads += (sequence_parallel ? sum over tp of partial : partial), partial split over grads
// in order; partial is overwritten. ZS_CHECKs that the sizes add up.
Status AccumulateReplicatedGrads(Communicator& tp, bool sequence_parallel, std::span<float> partial,
                                 std::initializer_list<std::span<float>> grads);

}  // namespace zs::tp
