// NullCommunicator: a Communicator that moves nothing, for planning. Every operation completes
// at once with OK and never reads or writes its buffers, so the runtime's real gather and
// reduce code (GatherCoordinator, GradientReducer) can be driven on a CountingDevice to count
// what they allocate, as one rank of a group of `size` ranks would.
//
// Contract
// - rank() and size() are the planned rank's; Split returns a NullCommunicator of the same size
//   and rank (the engine splits dp into a gather and a reduce group of the same ranks); a
//   negative color gets nullptr, as the interface says.
// - Thread-safe (it has no state after construction).
#pragma once

#include <memory>
#include <string>

#include "runtime/comm/communicator.h"

namespace zs {

class NullCommunicator final : public Communicator {
 public:
  NullCommunicator(int rank, int size, std::string group_name = "planned");

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend_name() const override { return "null"; }
  const CommOptions& options() const override { return options_; }

  CommHandle StartAllGather(const void*, void*, size_t, DType) override { return {}; }
  CommHandle StartReduceScatter(const void*, void*, size_t, DType, ReduceOp) override { return {}; }
  CommHandle StartAllReduce(const void*, void*, size_t, DType, ReduceOp) override { return {}; }
  CommHandle StartBroadcast(void*, size_t, DType, int) override { return {}; }
  CommHandle StartSend(const void*, size_t, DType, int) override { return {}; }
  CommHandle StartRecv(void*, size_t, DType, int) override { return {}; }
  CommHandle StartBarrier() override { return {}; }
  CommHandle StartAllToAllv(const void*, std::span<const size_t>, std::span<const size_t>, void*,
                            std::span<const size_t>, std::span<const size_t>, DType) override {
    return {};
  }
  StatusOr<std::unique_ptr<Communicator>> Split(int color, int key, std::string name) override;

 private:
  const int rank_;
  const int size_;
  CommOptions options_;
};

}  // namespace zs
