// FabricTransfer: the tagged sends and receives of one communicator operation, and the one wait
// loop that drives them to completion (manual progress, back-off, deadline, dead peers).
//
// Contract
// - Created by the thread that runs one operation (OpQueue); used by that thread only,
//   except OnCompletion, which the endpoint calls under its mutex from whichever thread read
//   the completion queue (several communicators may share one endpoint).
// - Send/Recv post at once when the provider accepts; on -FI_EAGAIN the request waits in a
//   retry queue that every WaitSome call drains first (manual progress: the CQ is read between
//   tries). Buffers must stay valid until the request's cookie is returned by WaitSome.
// - WaitSome blocks until at least one request finished and returns their cookies, or fails:
//   DeadlineExceeded once `timeout` has passed since construction (naming the operation and the
//   ranks still owing data), Unavailable when a peer on this host died (checked every ~200 ms,
//   naming its rank and pid) or the provider reported an error for a request (naming the peer),
//   InvalidArgument when a peer sent a message of another size (a mismatched call).
// - Busy-polling is bounded: a few dozen empty polls spin, then the thread yields, then it
//   sleeps in short naps, so ranks oversubscribing the cores do not starve each other.
// - The destructor cancels what is still posted, progresses for a short grace period, and hands
//   requests that still did not complete to the endpoint (FabricEndpoint::OrphanAll), so an
//   abandoned operation never leaves libfabric pointing into freed request memory. The caller's
//   buffers of a failed operation may still be written until the communicator is destroyed.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/fabric/fabric_endpoint.h"
#include "runtime/comm/fabric/fabric_peer.h"

namespace zs {

// Bounded busy-polling: Idle() after an empty poll spins a few dozen times, then yields, then
// naps (10..200 us); Reset() after progress.
class PollBackoff {
 public:
  void Idle();
  void Reset() { idle_polls_ = 0; }

 private:
  int idle_polls_ = 0;
};

class FabricTransfer {
 public:
  // `addresses` and `peers` are indexed by group rank and must outlive the transfer, as must
  // `liveness` (over the same peers; null: PeerGone before every send).
  FabricTransfer(FabricEndpoint& endpoint, const std::vector<fi_addr_t>& addresses,
                 const std::vector<FabricPeer>& peers, std::string description,
                 std::chrono::milliseconds timeout, PeerLiveness* liveness = nullptr);
  ~FabricTransfer();
  FabricTransfer(const FabricTransfer&) = delete;
  FabricTransfer& operator=(const FabricTransfer&) = delete;

  void Send(int peer, const void* buffer, size_t length, uint64_t tag, uint64_t cookie);
  void Recv(int peer, void* buffer, size_t length, uint64_t tag, uint64_t cookie);

  // Appends the cookies of finished requests (at least one, unless nothing is outstanding).
  Status WaitSome(std::vector<uint64_t>* finished);
  // One non-blocking round of WaitSome: retries refused posts, reads the CQ, appends the
  // cookies of finished requests; *progressed tells whether anything moved.
  Status Poll(std::vector<uint64_t>* finished, bool* progressed);
  // DeadlineExceeded past the deadline; Unavailable when a peer still owing data died.
  Status CheckHealth();
  // Waits for every request posted so far.
  Status WaitAll();
  int outstanding() const { return in_flight_ + int(retry_.size()); }
  // Memory that requests of this transfer point into and that must outlive them if the
  // provider never completes them (see the destructor). Each call adds one block.
  void KeepAliveIfOrphaned(std::shared_ptr<void> memory) {
    keep_alive_.push_back(std::move(memory));
  }

  const std::string& description() const { return description_; }

  // Called by FabricEndpoint::Progress under the endpoint mutex.
  void OnCompletion(FabricRequest* request);

 private:
  enum class State : uint8_t { kFree, kRetry, kPosted };
  FabricRequest* NewRequest(bool is_send, int peer, void* buffer, size_t length, uint64_t tag,
                            uint64_t cookie);
  void Post(FabricRequest* request);
  Status CheckFinished(const FabricRequest& request) const;
  Status TimedOut() const;
  Status CheckPeersAlive() const;
  void Abandon();

  FabricEndpoint& endpoint_;
  const std::vector<fi_addr_t>& addresses_;
  const std::vector<FabricPeer>& peers_;
  PeerLiveness* const liveness_;
  const std::string description_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::steady_clock::time_point deadline_;
  std::chrono::steady_clock::time_point next_liveness_check_;

  // Owned by the operation's thread.
  std::vector<std::unique_ptr<FabricRequest>> requests_;  // every request this transfer made
  std::vector<State> states_;                             // by index into requests_
  std::vector<FabricRequest*> free_;
  std::deque<FabricRequest*> retry_;  // -FI_EAGAIN: post again after progress
  int in_flight_ = 0;                 // requests in state kPosted
  Status post_error_;                 // a post that failed with something other than EAGAIN
  PollBackoff backoff_;
  std::vector<std::shared_ptr<void>> keep_alive_;

  std::mutex completed_mu_;
  std::vector<FabricRequest*> completed_;  // guarded by completed_mu_
};

}  // namespace zs
