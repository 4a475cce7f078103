// SharedGroup: the state that the N ranks of one `local` group (threads of one process) share:
// per-rank published calls and arrival counters (the rendezvous of every collective), the
// point-to-point channels, the failure flags of each rank and the children being built by Split.
//
// Contract
// - One SharedGroup per group, shared (shared_ptr) by the LocalCommunicators of its ranks. Each
//   rank's methods are called by the thread running that rank's operation, one at a time (its
//   OpQueue's worker, or its caller for a blocking form: op_queue.h), except MarkDead,
//   called by the communicator's destructor after its worker stopped.
// - Steps: each rank counts the rendezvous points ("steps") it passed; every rank passes the
//   same steps in the same order because every collective has a fixed number of them, decided
//   by the (checked) call. Arrive(rank, step) announces that the rank reached `step` (its writes
//   before that are visible to the ranks that then see it); WaitAll(step) blocks until every
//   rank reached it.
// - Calls: Publish stores a rank's call for collective number `seq` in a two-entry history
//   (seq % 2). A rank can be at most one collective ahead of the slowest one still inside
//   collective seq, so the entry of seq stays readable until every rank left it.
// - Every wait has a deadline and fails fast: a waited-for rank that was destroyed (MarkDead)
//   gives kUnavailable, one whose communicator failed gives kAborted with its error, calls that
//   differ gives kInvalidArgument naming both calls and ranks (all_to_all counts that disagree
//   between two ranks: naming both ranks and both counts); the deadline gives
//   kDeadlineExceeded naming the missing ranks.
// - All methods are thread-safe; the guarded fields are under mu_, arrival counters are atomics
//   (also written under mu_ so that condition-variable waits see them).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/base/dtype.h"
#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/op_checks.h"
#include "runtime/device/memory_tracker.h"

namespace zs::local {

using Clock = std::chrono::steady_clock;

enum class CallKind : uint8_t {
  kAllGather = 0,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kBarrier,
  kSplit,
  kAllToAll,
};

// One rank's side of one collective, as published to its peers.
struct CollectiveCall {
  uint64_t seq = 0;  // 1-based number of the collective within the group
  CallKind kind = CallKind::kBarrier;
  size_t count = 0;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;
  const void* send = nullptr;
  void* recv = nullptr;
  int color = 0;  // split only
  int key = 0;    // split only
  // all_to_all only: this rank's counts and offsets. Shared, so that the published copy keeps
  // them alive for the peers that read them, however this rank's operation ends.
  std::shared_ptr<const AllToAllLayout> layout;
};

// "all_reduce(count=10, f32, sum)".
std::string DescribeCall(const CollectiveCall& call);
// Whether two ranks' calls are the same collective (kind, count, dtype, op, root as relevant;
// all_to_all: kind and dtype, its counts are compared pairwise by CheckCalls).
bool CallsMatch(const CollectiveCall& a, const CollectiveCall& b);

class SharedGroup {
 public:
  SharedGroup(std::string name, int world);
  ~SharedGroup();
  SharedGroup(const SharedGroup&) = delete;
  SharedGroup& operator=(const SharedGroup&) = delete;

  const std::string& name() const { return name_; }
  int world() const { return world_; }

  // Stores `call` as `rank`'s collective call.seq and arrives at `step`.
  void Publish(int rank, const CollectiveCall& call, uint64_t step);
  void Arrive(int rank, uint64_t step);
  // Blocks until every rank arrived at `step`. With `mine`, also checks that every arrived
  // rank published a call matching it (`step` must then be the step Publish used). `what`
  // names the operation in errors.
  Status WaitAll(int rank, uint64_t step, const CollectiveCall* mine, Clock::time_point deadline,
                 std::chrono::milliseconds timeout, std::string_view what);
  // The call `rank` published for collective `seq`; valid after a WaitAll at its step.
  const CollectiveCall& CallOf(int rank, uint64_t seq) const;

  // Point-to-point. Send copies the data (into the receiver's posted buffer when it is already
  // waiting, else into a scratch message counted in `tracker`) and never waits for the
  // receiver. Recv takes the next message from `src` in order, waiting until `deadline`.
  Status Send(int src, int dst, const void* buffer, size_t count, DType dtype,
              MemoryTracker* tracker, std::string_view what);
  Status Recv(int dst, int src, void* buffer, size_t count, DType dtype, Clock::time_point deadline,
              std::chrono::milliseconds timeout, std::string_view what);

  // Records that `rank`'s communicator failed with `status`; its waiting peers fail fast.
  void MarkFailed(int rank, const Status& status);
  // Records that `rank`'s communicator was destroyed; its waiting peers fail fast. Releases the
  // rank's tracker from its unreceived messages (they stay receivable).
  void MarkDead(int rank);

  // The group built by Split for collective `seq` and `color` (created by the first member that
  // asks, forgotten once all `size` members took it).
  std::shared_ptr<SharedGroup> TakeChild(uint64_t seq, int color, int size, std::string name);

 private:
  struct alignas(64) RankState {
    std::atomic<uint64_t> arrived{0};  // last step reached; stored under mu_
    CollectiveCall calls[2];           // by seq % 2; written under mu_ by the rank itself
    bool dead = false;                 // guarded by mu_
    bool failed = false;               // guarded by mu_
    Status failure;                    // guarded by mu_
  };
  // A message sent and not yet received; data is a scratch copy counted in tracker.
  struct Message {
    std::unique_ptr<std::byte[]> data;
    size_t count = 0;
    DType dtype = DType::kF32;
    size_t bytes = 0;
    MemoryTracker* tracker = nullptr;  // null once the sender is gone
  };
  // A receive waiting for its message.
  struct RecvPost {
    enum State { kWaiting, kFilling, kDone };
    void* buffer;
    size_t count;
    DType dtype;
    State state = kWaiting;
    Status status;
  };
  struct Channel {  // messages from one rank to another, in send order
    std::deque<Message> pending;
    RecvPost* waiting = nullptr;
  };
  struct ChildEntry {
    std::shared_ptr<SharedGroup> group;
    int taken = 0;
  };

  bool AllArrived(uint64_t step) const;
  // Compares the calls of the ranks that arrived at `step` with `mine` (under mu_ or after all
  // arrived).
  Status CheckCalls(int rank, uint64_t step, const CollectiveCall& mine) const;
  Channel& ChannelOf(int src, int dst) { return channels_[size_t(src) * world_ + dst]; }
  void FreeMessage(Message& message);
  // Unavailable / Aborted if `peer` is dead or failed (under mu_), else OK.
  Status PeerGone(int peer, std::string_view what) const;
  std::string Missing(uint64_t step) const;

  const std::string name_;
  const int world_;
  std::vector<std::unique_ptr<RankState>> ranks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Channel> channels_;                            // guarded by mu_
  std::map<std::pair<uint64_t, int>, ChildEntry> children_;  // guarded by mu_
};

}  // namespace zs::local
