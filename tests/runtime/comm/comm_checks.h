// Backend-generic conformance checks of a Communicator (library target zs_comm_checks).
//
// Contract
// - Every check is collective: all ranks of the communicator call the same check with the same
//   arguments, in the same order, from their own thread or process. A check returns OK iff
//   every output element on this rank equals a reference computed independently on the host
//   (bit for bit: the reference accumulates in f32 in rank order 0..N-1 and rounds once, as
//   communicator.h promises), else an error naming the check, the rank and the first wrong
//   element. Errors of the communicator itself are returned with the check's name prepended.
// - Inputs come from InputValue(rank, index, seed): deterministic, never zero, never NaN,
//   positive, exactly representable in every dtype, with varied exponents so that summation
//   order changes results. Outputs are pre-filled with a sentinel that no result can equal.
// - Every handle a check starts is waited before it returns, also on failure.
// - RunAllCommChecks(comm) runs the whole set at a few sizes (work for any backend and world
//   size; about a second at 4 ranks). Argument errors are rejected by Start...() before the
//   operation is queued, so they never break the communicator: the harness goes on using it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/base/dtype.h"
#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"

namespace zs::testing {

// The input element `index` of `rank` for a check seeded with `seed`, already rounded to dtype.
float InputValue(int rank, size_t index, uint32_t seed, DType dtype);

Status CheckAllGather(Communicator& comm, size_t count, DType dtype, uint32_t seed,
                      bool in_place = false);
Status CheckReduceScatter(Communicator& comm, size_t count, DType dtype, ReduceOp op, uint32_t seed,
                          bool in_place = false);
Status CheckAllReduce(Communicator& comm, size_t count, DType dtype, ReduceOp op, uint32_t seed,
                      bool in_place = false);
Status CheckBroadcast(Communicator& comm, size_t count, DType dtype, int root, uint32_t seed);
// Every rank sends `messages` messages (sizes count, count/2+1, 0, ...) to rank+1 and receives
// as many from rank-1, all started before any is waited; checks their order and contents.
// A no-op at world size 1.
Status CheckSendRecvRing(Communicator& comm, size_t count, DType dtype, uint32_t seed,
                         int messages = 3);
// Even all-to-all: block p of rank r's send buffer is InputValue(r, p * count + i); rank r must
// receive block p == rank p's block r.
Status CheckAllToAll(Communicator& comm, size_t count, DType dtype, uint32_t seed);
// Uneven all-to-all: rank r sends AllToAllCount(r, p, base) elements to rank p, zero for about a
// third of the pairs (and for every pair when base == 0); send blocks are laid out in reverse
// peer order and recv blocks rotated, each with a gap of sentinel elements that must stay
// untouched.
size_t AllToAllCount(int from, int to, size_t base);
Status CheckAllToAllv(Communicator& comm, size_t base, DType dtype, uint32_t seed);
// Collective, and breaks the communicator: rank 0 sends one element more to rank `size()-1`
// than that rank expects. Returns this rank's status of the all-to-all unchanged (callers check
// it: InvalidArgument naming both ranks and counts on the pair, OK or Aborted elsewhere).
// Needs at least 2 ranks.
Status RunMismatchedAllToAll(Communicator& comm, DType dtype);
// Several barriers between all-reduces; checks every status.
Status CheckBarrier(Communicator& comm);
// Starts `ops` collectives of mixed kinds and dtypes on distinct buffers, then waits all.
Status CheckManyInFlight(Communicator& comm, size_t count, uint32_t seed, int ops = 16);
// reduce_scatter followed by all_gather gives the same bits as all_reduce (and the reference).
Status CheckReduceScatterAllGatherEqualsAllReduce(Communicator& comm, size_t count, DType dtype,
                                                  ReduceOp op, uint32_t seed);
// Split into even/odd ranks, into rows and columns of a grid with rows of 2, reversed by key,
// and with rank 0 opting out (negative color): checks sizes, ranks, membership (an all-gather
// of the parent ranks) and collectives on the children.
Status CheckSplit(Communicator& comm);
// Sends whose receives are posted late must not hold up anything else (needs 3 ranks; a no-op
// below; ranks past 2 only take part in the splits and barriers). Rank 0 starts sends of 16 KiB
// and 1 MiB + 12 B to rank 2, which posts the receives only after: (1) ranks 0 and 1 ran every
// kind of operation, large sends and receives too, on another communicator split from the same
// parent; (2) rank 0 sent the same sizes to rank 1 on the same communicator; (3) every rank ran
// large collectives on the same communicator. Every operation must complete. For backends
// whose sends never wait for their receives to be started (local, fabric); nccl's are
// stream-ordered (see its header) and would deadlock by design.
Status CheckLateReceives(Communicator& comm);
// Bad roots and peers, null buffers, bad all-to-all layouts (span sizes, overflowing ranges,
// overlaps, its own counts differing): every Start returns InvalidArgument, naming the values
// for the all-to-all cases.
Status CheckArgumentErrors(Communicator& comm);

// All of the above at a few sizes (0, 1, 7, 1001 and one 65537), every dtype and op.
Status RunAllCommChecks(Communicator& comm);

}  // namespace zs::testing
