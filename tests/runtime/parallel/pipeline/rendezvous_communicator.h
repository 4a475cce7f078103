// Test helper: a Communicator decorator with the strictest point-to-point semantics that
// communicator.h allows, to test deadlock freedom against them rather than against the `local`
// backend's eager sends.
//
// Contract: header-only, for tests. RendezvousCommunicator wraps a communicator (borrowed, or
// owned for the children of Split) and runs EVERY operation on one queue worker in start order
// (OpQueue), one at a time. A Send does not start moving data before the matching Recv (the same
// pair, the same sequence number, on a communicator of the same name in the same
// RendezvousWorld) has reached the head of the receiver's queue, i.e. is posted; until then the
// sender's queue is blocked, as on a transport that only sends into posted buffers. A Send that
// waits longer than the wrapped communicator's timeout fails with DeadlineExceeded naming the
// pair, so a deadlock shows up as an error, never a hang. Collectives and Split are forwarded.
// RendezvousWorld holds the posted-receive counters shared by the ranks of one run.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/op_queue.h"

namespace zs::testing {

class RendezvousWorld {
 public:
  // Called when a receive of `dst` from `src` on group `group` reaches the head of its queue.
  void Posted(const std::string& group, int src, int dst) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++posted_[{group, src, dst}];
    }
    cv_.notify_all();
  }
  // Waits until the `seq`-th (0-based) receive of that pair was posted.
  bool WaitPosted(const std::string& group, int src, int dst, uint64_t seq,
                  std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return posted_[{group, src, dst}] > seq; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::tuple<std::string, int, int>, uint64_t> posted_;  // guarded by mu_
};

class RendezvousCommunicator final : public Communicator {
 public:
  RendezvousCommunicator(RendezvousWorld& world, Communicator* inner,
                         std::unique_ptr<Communicator> owned = nullptr)
      : world_(world),
        inner_(inner),
        owned_(std::move(owned)),
        queue_(std::make_unique<OpQueue>("rendezvous")) {}
  ~RendezvousCommunicator() override { queue_.reset(); }  // drains before inner_ goes away

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string_view backend_name() const override { return inner_->backend_name(); }
  const CommOptions& options() const override { return inner_->options(); }

  CommHandle StartAllGather(const void* send, void* recv, size_t count, DType dtype) override {
    return Forward("all_gather",
                   [=, this] { return inner_->StartAllGather(send, recv, count, dtype).Wait(); });
  }
  CommHandle StartReduceScatter(const void* send, void* recv, size_t count, DType dtype,
                                ReduceOp op) override {
    return Forward("reduce_scatter", [=, this] {
      return inner_->StartReduceScatter(send, recv, count, dtype, op).Wait();
    });
  }
  CommHandle StartAllReduce(const void* send, void* recv, size_t count, DType dtype,
                            ReduceOp op) override {
    return Forward("all_reduce", [=, this] {
      return inner_->StartAllReduce(send, recv, count, dtype, op).Wait();
    });
  }
  CommHandle StartBroadcast(void* buffer, size_t count, DType dtype, int root) override {
    return Forward("broadcast",
                   [=, this] { return inner_->StartBroadcast(buffer, count, dtype, root).Wait(); });
  }
  CommHandle StartBarrier() override {
    return Forward("barrier", [this] { return inner_->StartBarrier().Wait(); });
  }
  CommHandle StartAllToAllv(const void* send, std::span<const size_t> send_counts,
                            std::span<const size_t> send_offsets, void* recv,
                            std::span<const size_t> recv_counts,
                            std::span<const size_t> recv_offsets, DType dtype) override {
    // The spans need not outlive the call: keep copies for the queued operation.
    std::vector<size_t> sc(send_counts.begin(), send_counts.end());
    std::vector<size_t> so(send_offsets.begin(), send_offsets.end());
    std::vector<size_t> rc(recv_counts.begin(), recv_counts.end());
    std::vector<size_t> ro(recv_offsets.begin(), recv_offsets.end());
    return Forward("all_to_allv", [=, this] {
      return inner_->StartAllToAllv(send, sc, so, recv, rc, ro, dtype).Wait();
    });
  }
  CommHandle StartSend(const void* buffer, size_t count, DType dtype, int peer) override {
    const uint64_t seq = sends_[peer]++;
    return Forward("send", [=, this] {
      const std::string& group = group_name();
      if (!world_.WaitPosted(group, rank(), peer, seq, options().timeout)) {
        return DeadlineExceededError(
            fmt::format("rendezvous send {} from rank {} to rank {} on group '{}': no receive "
                        "posted within {} ms",
                        seq, rank(), peer, group, options().timeout.count()));
      }
      return inner_->StartSend(buffer, count, dtype, peer).Wait();
    });
  }
  CommHandle StartRecv(void* buffer, size_t count, DType dtype, int peer) override {
    return Forward("recv", [=, this] {
      world_.Posted(group_name(), peer, rank());
      return inner_->StartRecv(buffer, count, dtype, peer).Wait();
    });
  }
  StatusOr<std::unique_ptr<Communicator>> Split(int color, int key, std::string name) override {
    // Split is collective and blocking: drain this queue first so the order is kept.
    ZS_RETURN_IF_ERROR(Forward("split-fence", [] { return OkStatus(); }).Wait());
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> child, inner_->Split(color, key, name));
    if (child == nullptr) return std::unique_ptr<Communicator>();
    Communicator* raw = child.get();
    return std::unique_ptr<Communicator>(
        std::make_unique<RendezvousCommunicator>(world_, raw, std::move(child)));
  }

 private:
  CommHandle Forward(const char* what, std::function<Status()> fn) {
    return queue_->Submit(fmt::format("rendezvous {} on group '{}'", what, group_name()),
                          std::move(fn));
  }

  RendezvousWorld& world_;
  Communicator* const inner_;
  std::unique_ptr<Communicator> owned_;  // the children of Split own their inner communicator
  std::map<int, uint64_t> sends_;        // per peer: sends started; the user thread only
  std::unique_ptr<OpQueue> queue_;
};

}  // namespace zs::testing
