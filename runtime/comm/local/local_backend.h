// The `local` communication backend: the N ranks of a group are threads of one process that
// read each other's buffers directly. It is the reference backend of the conformance suite,
// the backend of the multi-rank unit tests, and fast enough for CPU training on one host.
//
// Contract
// - MakeLocalBackend() returns the factory registered as "local" (via ZS_COMM_BACKENDS).
//   Available() is always OK.
// - Connect(store, rank, world, options) is called once by each rank's thread with the SAME
//   Store object. The ranks find their shared state in a process-wide table keyed by
//   (store.Describe(), options.group_name, world) and a per-rank generation number (the n-th
//   Connect of a rank joins the n-th group of that key), then rendezvous through the store:
//   each rank sets "zs/local/<group>/w<world>/g<gen>/<rank>" and waits for the others. Ranks
//   missing after options.timeout give DeadlineExceeded naming them; ranks of another process
//   (a FileStore shared between processes) give InvalidArgument: use `fabric` there.
// - The communicators follow communicator.h; each owns one OpQueue worker thread.
//
// Algorithms ([Note: local collectives])
// Every collective is a rendezvous in "steps" (shared_group.h). At step 1 ("arrive") each rank
// publishes its call (kind, count, dtype, op, root, buffer addresses); waiting there also
// compares the calls, so a mismatch fails at once on every rank that sees it, naming both calls
// and ranks. Then each rank works directly on its peers' buffers, with no intermediate copy:
// - all_gather: rank r copies block k of the output from rank k's send buffer, for every k
//   (its own block too unless in place). 2 steps: arrive, done.
// - reduce_scatter: rank r computes block r of the result from the N send buffers in one pass,
//   ReduceSources(rank order 0..N-1) into its recv buffer. 2 steps.
// - all_reduce: the count is cut into N chunks (64-element aligned); rank c reduces chunk c from
//   all N send buffers into its own recv buffer (a reduce-scatter), step "reduced", then copies
//   every other chunk c from rank c's recv buffer (an all-gather). 3 steps. Because
//   ReduceSources is element-wise in rank order, this equals reduce_scatter + all_gather bit for
//   bit, for any chunking. In place is safe: chunk c of any buffer is written only by its owner
//   and read in phase 1 only by rank c.
// - broadcast: non-roots copy from the root's buffer. 2 steps.
// - all_to_all: the arrive step also compares the counts of every pair of ranks, so a count
//   that disagrees fails EVERY rank at once, naming the pair and both counts, before anyone
//   reads a buffer; rank r then copies block r of each rank p's send buffer into its recv
//   block p. 2 steps for every rank, whatever its counts.
// - barrier: the arrive step only. Zero counts: the arrive step only (ordering and checks).
// - The "done" step keeps every buffer alive until all peers finished reading it.
// - send/recv: eager. A send copies into the receiver's posted buffer when the receive is
//   already waiting (one copy), else into a scratch message (counted in options.tracker, host
//   tier, kCommBuffers) that the receive copies out, so sends never wait for receives and ring
//   exchanges cannot deadlock. Messages of one pair are received in send order.
// - split: the arrive step publishes (color, key); every member computes the same membership,
//   ordered by (key, parent rank), and takes the child's shared state from the parent's.
// Failure: a wait fails at the deadline (DeadlineExceeded naming the missing ranks), at once if a
// missing rank's communicator was destroyed (Unavailable) or failed (Aborted with its error).
// After a deadline an operation returns, but a peer that is still reading this rank's buffer
// (only if it is slower than the whole timeout) may still read it: the caller should treat a
// failed communicator's buffers as in use until it is destroyed.
#pragma once

#include <memory>

#include "runtime/comm/backend_registry.h"

namespace zs {

std::unique_ptr<Backend> MakeLocalBackend();

}  // namespace zs
