// NcclCommunicator: one rank's NCCL communicator, created by the nccl backend
// (nccl_backend.h) or by Split().
//
// Contract
// - Owns the ncclComm, a non-blocking CUDA stream on its device, a 4-byte device scratch for
//   Barrier, and one waiter thread. Buffers are device memory of this rank's device and belong
//   to the caller until the handle is waited.
// - Start...() (one caller thread at a time) checks the arguments, makes this rank's device
//   current on the calling thread, enqueues the NCCL call on the stream (send/recv inside
//   ncclGroupStart/End), records a CUDA event after it and returns. It blocks the host only
//   while NCCL enqueues (a non-blocking communicator may return ncclInProgress; it is polled).
//   Zero counts enqueue nothing but still get an event, so they keep their place in the order.
// - The waiter thread completes handles in start order: an op is done when its event is.
//   While it waits it polls ncclCommGetAsyncError; an asynchronous NCCL error, or an op still
//   running options().timeout after it became the oldest unfinished one, aborts the
//   communicator (ncclCommAbort): that op fails (DeadlineExceeded naming the op, the group and
//   the rank, or the NCCL error) and every later one, queued or new, fails with kAborted.
// - Send and Recv are stream-ordered like everything else: a Send blocks this rank's stream
//   until the peer's matching Recv runs. Ring exchanges must therefore post them in an order
//   that matches (e.g. even ranks send first, odd ranks receive first).
// - All-to-all is one NCCL group of ncclSend/ncclRecv, one pair per peer with a nonzero count
//   (its own block is a ncclSend/ncclRecv to itself, which NCCL allows, so the whole exchange is
//   stream-ordered). NCCL cannot see a count that disagrees between two ranks: the receive then
//   gets fewer bytes or the transfer never completes; the second case fails at the timeout
//   (DeadlineExceeded, communicator aborted), the first is the caller's bug (as in NCCL itself).
// - The destructor waits for the unfinished operations (each bounded by the timeout), then
//   finalizes and destroys the communicator (or has already aborted it). Children from Split()
//   must be destroyed before their parent.
//
// [Note: nccl determinism]
// The CPU backends reduce in rank order (host_reduce.h), so their results are bit-identical
// for any algorithm, chunking or world layout; that contract does NOT hold for this backend.
// NCCL picks ring, tree, NVLS or CollNet algorithms and a channel split by message size and
// topology, and each changes the order of the additions (bf16/f16 sums are also accumulated
// in the element type per step, not once in f32). What NCCL does guarantee: for a fixed NCCL
// version, topology, world size, message size and algorithm/protocol (pin them with NCCL_ALGO
// and NCCL_PROTO for reproducible runs), repeated calls give identical bits, and all ranks get
// the same bits from an all-reduce. kMax is exact everywhere; kAvg is NCCL's ncclAvg.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "runtime/comm/communicator.h"

struct ncclComm;     // ncclComm_t is ncclComm*
struct CUstream_st;  // cudaStream_t is CUstream_st*
struct CUevent_st;   // cudaEvent_t is CUevent_st*

namespace zs {

class NcclCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (already initialised) on `device`; creates the stream, the
  // scratch and the waiter. On failure the comm is aborted and the error returned.
  static StatusOr<std::unique_ptr<NcclCommunicator>> Create(ncclComm* comm, int device,
                                                            CommOptions options);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend_name() const override { return "nccl"; }
  const CommOptions& options() const override { return options_; }
  int device() const { return device_; }

  CommHandle StartAllGather(const void* send, void* recv, size_t count, DType dtype) override;
  CommHandle StartReduceScatter(const void* send, void* recv, size_t count, DType dtype,
                                ReduceOp op) override;
  CommHandle StartAllReduce(const void* send, void* recv, size_t count, DType dtype,
                            ReduceOp op) override;
  CommHandle StartBroadcast(void* buffer, size_t count, DType dtype, int root) override;
  CommHandle StartSend(const void* buffer, size_t count, DType dtype, int peer) override;
  CommHandle StartRecv(void* buffer, size_t count, DType dtype, int peer) override;
  CommHandle StartAllToAllv(const void* send, std::span<const size_t> send_counts,
                            std::span<const size_t> send_offsets, void* recv,
                            std::span<const size_t> recv_counts,
                            std::span<const size_t> recv_offsets, DType dtype) override;
  CommHandle StartBarrier() override;
  StatusOr<std::unique_ptr<Communicator>> Split(int color, int key, std::string name) override;

 private:
  // Issues one NCCL call on (comm, stream); returns an ncclResult_t as int.
  using IssueFn = std::function<int(ncclComm*, CUstream_st*)>;
  struct Pending {
    std::shared_ptr<CommWork> work;
    CUevent_st* event = nullptr;
    // Set by the waiter when the op becomes the oldest unfinished one.
    std::optional<std::chrono::steady_clock::time_point> deadline;
  };

  NcclCommunicator(ncclComm* comm, int device, int rank, int size, CommOptions options);
  Status Init();
  // Validation already done: `valid` is its result. Enqueues `issue` (unless count == 0).
  CommHandle Enqueue(std::string description, const Status& valid, size_t count, IssueFn issue);
  void WaiterLoop();
  // Aborts the comm (once) and fails `failed` with `status`, every pending op with kAborted.
  // Called with mu_ held.
  void FailLocked(std::shared_ptr<CommWork> failed, Status status);
  Status AbortedStatus() const;  // the kAborted status of ops after the first failure (mu_ held)

  const int device_;
  const int rank_;
  const int size_;
  const CommOptions options_;
  CUstream_st* stream_ = nullptr;  // owned; NCCL ops run here in start order
  float* scratch_ = nullptr;       // device, 1 element, for Barrier

  // mu_ guards the comm (NCCL calls on one comm are serialised: enqueue, polling, abort) and
  // everything below it.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  ncclComm* comm_ = nullptr;  // null once aborted or destroyed
  std::deque<Pending> pending_;
  Status broken_;  // the first failure; OK while healthy
  bool stopping_ = false;
  std::thread waiter_;
};

}  // namespace zs
