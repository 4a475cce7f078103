// Communicator: the collectives and point-to-point operations of one process group, whatever
// the transport underneath (ranks as threads, libfabric processes, NCCL on GPUs).
//
// Contract
// - A Communicator is one rank's view of a group of `size()` ranks. It is created by a
//   Backend (backend_registry.h) or by Split() of a parent communicator, and owned by the
//   caller (unique_ptr). A parent must outlive the communicators split from it.
// - Every operation is asynchronous: Start...() validates its arguments, queues the operation
//   and returns a CommHandle (comm_handle.h) at once. Operations of one communicator run in the
//   order they were started; every rank must start the same collectives in the same order with
//   matching counts and dtypes (as in NCCL and MPI). Different communicators progress
//   independently. The blocking forms (AllReduce(...)) are Start...().Wait(); a backend may run
//   them on the calling thread (blocking_call.h).
// - Buffers belong to the caller and must stay valid, untouched, until the handle is waited.
//   Buffers are host memory for the cpu backends and device memory for nccl.
// - Counts are in elements of `dtype`. AllGather/ReduceScatter take `count` elements per rank:
//   the full buffer holds size()*count elements and rank r's block starts at r*count.
//   In-place forms are allowed: AllGather with send == recv + rank*count, ReduceScatter with
//   recv == send + rank*count, AllReduce with send == recv. Zero counts are valid no-ops that
//   still take part in the ordering.
// - AllToAll / AllToAllv (expert-parallel dispatch and combine): rank r sends block p of its
//   send buffer to rank p and receives block p of its recv buffer from rank p (its own block p
//   == r is a local copy). The even form sends `count` elements to every peer (block p is
//   elements [p*count, (p+1)*count)); the uneven form takes per-peer counts and element
//   offsets, `size()` entries in each of the four spans, copied at Start. send_counts[p] on
//   rank r must equal recv_counts[r] on rank p (so send_counts[r] == recv_counts[r] on rank
//   r). Not in place: the send ranges and the recv ranges must not overlap, nor two recv
//   ranges each other (send ranges may overlap: they are only read). Zero counts are valid,
//   also for every peer (null buffers then allowed). Start checks what one rank can see
//   (InvalidArgument naming the values: spans of the wrong size, offset + count overflowing,
//   overlaps, null buffers, its own send/recv count for itself differing); the buffers' ends
//   are the caller's to respect (no sizes are passed). A count that disagrees between two
//   ranks is InvalidArgument naming both ranks and both counts wherever the backend can see
//   it (local: every rank of the group, before any data moves; fabric: both ranks of the pair,
//   which exchange their counts first, while the other ranks finish normally); nccl cannot
//   see it (see its header). No backend truncates silently or hangs past the timeout.
// - Reductions are deterministic and independent of algorithm, chunking and world layout: each
//   element's result is ((x_0 + x_1) + x_2) + ... + x_{N-1} over ranks 0..N-1 in that order,
//   accumulated in f32 for bf16/f16 and rounded once (to nearest even) to the output dtype.
//   kAvg is that sum divided by N; kMax is the maximum (NaN propagates). So a reduce-scatter
//   followed by an all-gather gives the same bits as an all-reduce of the same data.
// - Failure never hangs: an operation that cannot complete within options().timeout (a dead
//   peer, a rank that never calls, a mismatched call) fails with an error naming the
//   operation, the group and the ranks involved. After a failed operation the communicator is
//   broken: every later operation fails at once with kAborted naming the first error.
// - Thread-safety: Start...() may be called from one thread at a time per communicator.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "runtime/base/dtype.h"
#include "runtime/base/status.h"
#include "runtime/comm/blocking_call.h"
#include "runtime/comm/comm_handle.h"
#include "runtime/device/memory_tracker.h"

namespace zs {

enum class ReduceOp : uint8_t { kSum = 0, kAvg, kMax };
std::string_view ReduceOpName(ReduceOp op);  // "sum", "avg", "max"

struct CommOptions {
  // How long any one operation may wait for its peers before it fails.
  std::chrono::milliseconds timeout{60'000};
  // The group's name in error messages and logs ("world", "dp", "tp", ...).
  std::string group_name = "world";
  // Where the backend records its scratch buffers (host tier, kCommBuffers); may be null.
  MemoryTracker* tracker = nullptr;
  // Backend-specific transport choice. fabric: the libfabric provider ("shm", "tcp"; empty =
  // the ZS_FABRIC_PROVIDER variable, else "shm" when every rank is on one host, else "tcp").
  std::string transport;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view backend_name() const = 0;  // "local", "fabric", "nccl"
  virtual const CommOptions& options() const = 0;
  const std::string& group_name() const { return options().group_name; }

  virtual CommHandle StartAllGather(const void* send, void* recv, size_t count, DType dtype) = 0;
  virtual CommHandle StartReduceScatter(const void* send, void* recv, size_t count, DType dtype,
                                        ReduceOp op) = 0;
  virtual CommHandle StartAllReduce(const void* send, void* recv, size_t count, DType dtype,
                                    ReduceOp op) = 0;
  // Root's buffer is sent; every other rank's buffer is overwritten.
  virtual CommHandle StartBroadcast(void* buffer, size_t count, DType dtype, int root) = 0;
  // Point-to-point: sends to / receives from `peer` of this group. Sends and receives between
  // one pair of ranks match in the order they were started (tags are not exposed).
  virtual CommHandle StartSend(const void* buffer, size_t count, DType dtype, int peer) = 0;
  virtual CommHandle StartRecv(void* buffer, size_t count, DType dtype, int peer) = 0;
  virtual CommHandle StartBarrier() = 0;
  // All-to-all. Even form: `count` elements to every peer: block p of `send` (elements
  // [p*count, (p+1)*count)) goes to rank p, block p of `recv` comes from rank p.
  CommHandle StartAllToAll(const void* send, void* recv, size_t count, DType dtype);
  // Uneven form: send_counts[p] elements starting at element send_offsets[p] of `send` go to
  // rank p; recv_counts[p] elements from rank p land at element recv_offsets[p] of `recv`.
  // The four spans have size() entries and are copied at Start (they need not outlive the
  // call). send_counts[p] on rank r must equal recv_counts[r] on rank p.
  virtual CommHandle StartAllToAllv(const void* send, std::span<const size_t> send_counts,
                                    std::span<const size_t> send_offsets, void* recv,
                                    std::span<const size_t> recv_counts,
                                    std::span<const size_t> recv_offsets, DType dtype) = 0;

  // Collective over this group: ranks passing the same `color` form a new group, ordered by
  // (`key`, parent rank). A negative color takes no part and gets nullptr. `name` names the
  // new group in errors and logs.
  virtual StatusOr<std::unique_ptr<Communicator>> Split(int color, int key, std::string name) = 0;

  // Blocking forms: Start...().Wait(), started inside a BlockingCallScope (a queue-driven
  // backend may then run the operation on this thread).
  Status AllGather(const void* send, void* recv, size_t count, DType dtype) {
    BlockingCallScope blocking;
    return StartAllGather(send, recv, count, dtype).Wait();
  }
  Status ReduceScatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
    BlockingCallScope blocking;
    return StartReduceScatter(send, recv, count, dtype, op).Wait();
  }
  Status AllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
    BlockingCallScope blocking;
    return StartAllReduce(send, recv, count, dtype, op).Wait();
  }
  Status Broadcast(void* buffer, size_t count, DType dtype, int root) {
    BlockingCallScope blocking;
    return StartBroadcast(buffer, count, dtype, root).Wait();
  }
  Status Send(const void* buffer, size_t count, DType dtype, int peer) {
    BlockingCallScope blocking;
    return StartSend(buffer, count, dtype, peer).Wait();
  }
  Status Recv(void* buffer, size_t count, DType dtype, int peer) {
    BlockingCallScope blocking;
    return StartRecv(buffer, count, dtype, peer).Wait();
  }
  Status Barrier() {
    BlockingCallScope blocking;
    return StartBarrier().Wait();
  }
  Status AllToAll(const void* send, void* recv, size_t count, DType dtype) {
    BlockingCallScope blocking;
    return StartAllToAll(send, recv, count, dtype).Wait();
  }
  Status AllToAllv(const void* send, std::span<const size_t> send_counts,
                   std::span<const size_t> send_offsets, void* recv,
                   std::span<const size_t> recv_counts, std::span<const size_t> recv_offsets,
                   DType dtype) {
    BlockingCallScope blocking;
    return StartAllToAllv(send, send_counts, send_offsets, recv, recv_counts, recv_offsets, dtype)
        .Wait();
  }
};

}  // namespace zs
