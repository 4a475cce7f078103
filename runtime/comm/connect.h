// ConnectFromEnvironment: the one call a multi-process program makes to join its job. It
// reads the launch variables (runtime/topology/launch_info.h), opens the rendezvous store,
// registers the built-in backends and connects this rank's world communicator.
//
// Contract
// - Collective over the job: every rank calls it once; it blocks until every rank has joined
//   or options.timeout passed (then an error naming the backend and the rendezvous).
// - Environment overrides: ZS_BACKEND replaces `backend_name` (zerorun --backend sets it),
//   ZS_COMM_TIMEOUT_MS replaces options.timeout. A malformed value is InvalidArgument naming
//   the variable.
// - The result is an EnvironmentCommunicator: a Communicator that forwards every operation to
//   the backend's communicator and also owns the store it was connected through, so the store
//   outlives the communicator (backends may use it after Connect) and nothing else needs to be
//   kept alive. Communicators split from it must be destroyed before it.
// - Under tcp:// rendezvous, rank 0 serves the store: its EnvironmentCommunicator must stay
//   alive while other ranks still connect or split.
// - Thread-safety: as any Communicator (communicator.h).
#pragma once

#include <memory>
#include <string_view>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/topology/launch_info.h"
#include "runtime/topology/store.h"

namespace zs {

class EnvironmentCommunicator final : public Communicator {
 public:
  EnvironmentCommunicator(LaunchInfo launch, std::unique_ptr<Store> store,
                          std::unique_ptr<Communicator> comm);
  ~EnvironmentCommunicator() override;

  const LaunchInfo& launch() const { return launch_; }
  Store& store() const { return *store_; }
  Communicator& inner() const { return *comm_; }

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  std::string_view backend_name() const override { return comm_->backend_name(); }
  const CommOptions& options() const override { return comm_->options(); }

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
  LaunchInfo launch_;
  std::unique_ptr<Store> store_;  // declared before comm_: destroyed after it
  std::unique_ptr<Communicator> comm_;
};

StatusOr<std::unique_ptr<EnvironmentCommunicator>> ConnectFromEnvironment(
    std::string_view backend_name, CommOptions options = {});

}  // namespace zs
