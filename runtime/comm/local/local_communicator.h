// LocalCommunicator: one rank's Communicator of the `local` backend (local_backend.h has the
// algorithms). Built by the backend's Connect or by Split; owns an OpQueue whose worker runs the
// operations in order against the group's SharedGroup.
//
// Contract
// - Follows communicator.h. Start...() validates, queues and returns; the queue's running thread
//   (its worker, or the caller of a blocking form on an idle queue: op_queue.h) does the
//   rendezvous and the copies, each operation with a deadline of options().timeout from the
//   moment it starts running.
// - Destruction finishes the queued operations (as OpQueue does), then marks this rank dead in
//   its group so that peers still waiting for it fail at once with kUnavailable.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/comm/local/shared_group.h"
#include "runtime/comm/op_queue.h"

namespace zs::local {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<SharedGroup> group, int rank, CommOptions options);
  ~LocalCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return group_->world(); }
  std::string_view backend_name() const override { return "local"; }
  const CommOptions& options() const override { return options_; }

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
  // Queues fn(deadline) and marks this rank failed in the group if it fails.
  CommHandle Enqueue(std::string description, std::function<Status(Clock::time_point)> fn);
  // Runs one collective on the queue's running thread (the rendezvous and the data movement).
  // Enqueue(what, RunCollective(call, what, deadline)): the tail of every collective's Start.
  CommHandle EnqueueCollective(CollectiveCall call, std::string what);
  Status RunCollective(CollectiveCall call, const std::string& what, Clock::time_point deadline);
  Status RunSplit(int color, int key, std::string name, const std::string& what,
                  Clock::time_point deadline, std::unique_ptr<Communicator>* result);
  // Arrives at the next step and waits for every rank there.
  Status Step(const std::string& what, Clock::time_point deadline);

  const std::shared_ptr<SharedGroup> group_;
  const int rank_;
  const CommOptions options_;
  uint64_t seq_ = 0;   // collectives started; the running operation's thread only
  uint64_t step_ = 0;  // steps passed; the running operation's thread only
  std::unique_ptr<OpQueue> queue_;
};

}  // namespace zs::local
