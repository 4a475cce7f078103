#include "runtime/comm/fabric/fabric_transfer.h"

#include <fmt/format.h>
#include <rdma/fi_errno.h>
#include <sched.h>

#include <algorithm>
#include <set>
#include <thread>

namespace zs {
namespace {

constexpr auto kLivenessPeriod = std::chrono::milliseconds(200);
constexpr auto kAbandonGrace = std::chrono::milliseconds(1000);
constexpr int kSpinPolls = 64;     // empty polls before yielding
constexpr int kYieldPolls = 2048;  // empty polls before sleeping

std::string RankList(const std::set<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return "[" + out + "]";
}

}  // namespace

FabricTransfer::FabricTransfer(FabricEndpoint& endpoint, const std::vector<fi_addr_t>& addresses,
                               const std::vector<FabricPeer>& peers, std::string description,
                               std::chrono::milliseconds timeout, PeerLiveness* liveness)
    : endpoint_(endpoint),
      addresses_(addresses),
      peers_(peers),
      liveness_(liveness),
      description_(std::move(description)),
      timeout_(timeout),
      deadline_(std::chrono::steady_clock::now() + timeout),
      next_liveness_check_(std::chrono::steady_clock::now() + kLivenessPeriod) {}

FabricTransfer::~FabricTransfer() { Abandon(); }

FabricRequest* FabricTransfer::NewRequest(bool is_send, int peer, void* buffer, size_t length,
                                          uint64_t tag, uint64_t cookie) {
  FabricRequest* request;
  if (!free_.empty()) {
    request = free_.back();
    free_.pop_back();
    const int slot = request->slot;
    *request = FabricRequest{};
    request->slot = slot;
  } else {
    requests_.push_back(std::make_unique<FabricRequest>());
    states_.push_back(State::kFree);
    request = requests_.back().get();
    request->slot = int(requests_.size()) - 1;
  }
  request->owner = this;
  request->is_send = is_send;
  request->peer = peer;
  request->buffer = buffer;
  request->length = length;
  request->tag = tag;
  request->cookie = cookie;
  return request;
}

void FabricTransfer::Post(FabricRequest* request) {
  // [Note: never send to a dead peer] The shm provider inserts a send into the receiver's
  // shared region under the receiver's spin lock. A receiver killed while holding that lock
  // leaves it held forever, and fi_tsend would spin in the provider, past every deadline of
  // ours. So a send to a peer known to be dead fails here instead of being posted. The check
  // reads /proc (several microseconds): with a PeerLiveness it runs at most once per period
  // (the communicator's: 1 ms) for each peer, not once per message.
  const bool gone = request->is_send && (liveness_ != nullptr ? liveness_->Gone(request->peer)
                                                               : PeerGone(peers_[request->peer]));
  if (gone) {
    states_[request->slot] = State::kFree;
    free_.push_back(request);
    if (post_error_.ok()) {
      post_error_ = UnavailableError(
          fmt::format("{}: rank {} ({}) died while this rank was sending to it", description_,
                      request->peer, peers_[request->peer].Describe()));
    }
    return;
  }
  const fi_addr_t address = addresses_[request->peer];
  const ssize_t rc = request->is_send ? endpoint_.PostSend(request, address)
                                      : endpoint_.PostRecv(request, address);
  if (rc == 0) {
    states_[request->slot] = State::kPosted;
    ++in_flight_;
  } else if (rc == -FI_EAGAIN) {
    states_[request->slot] = State::kRetry;
    retry_.push_back(request);
  } else {
    states_[request->slot] = State::kFree;
    free_.push_back(request);
    if (post_error_.ok()) {
      post_error_ = InternalError(fmt::format("{}: posting a {} of {} bytes {} rank {} failed: {}",
                                              description_, request->is_send ? "send" : "receive",
                                              request->length, request->is_send ? "to" : "from",
                                              request->peer, fi_strerror(int(-rc))));
    }
  }
}

void FabricTransfer::Send(int peer, const void* buffer, size_t length, uint64_t tag,
                          uint64_t cookie) {
  // libfabric takes a non-const pointer but never writes a send buffer.
  FabricRequest* request = NewRequest(true, peer, const_cast<void*>(buffer), length, tag, cookie);
  if (retry_.empty()) {
    Post(request);
  } else {
    states_[request->slot] = State::kRetry;
    retry_.push_back(request);
  }
}

void FabricTransfer::Recv(int peer, void* buffer, size_t length, uint64_t tag, uint64_t cookie) {
  FabricRequest* request = NewRequest(false, peer, buffer, length, tag, cookie);
  if (retry_.empty()) {
    Post(request);
  } else {
    states_[request->slot] = State::kRetry;
    retry_.push_back(request);
  }
}

void FabricTransfer::OnCompletion(FabricRequest* request) {
  std::lock_guard<std::mutex> lock(completed_mu_);
  completed_.push_back(request);
}

Status FabricTransfer::CheckFinished(const FabricRequest& request) const {
  const std::string_view direction = request.is_send ? "send to" : "receive from";
  if (request.error == FI_ETRUNC || request.error == FI_EMSGSIZE) {
    return InvalidArgumentError(fmt::format(
        "{}: rank {} sent more than the {} bytes this rank expected (tag {:#x}): the ranks called "
        "the operation with different counts",
        description_, request.peer, request.length, request.tag));
  }
  if (request.error != 0) {
    return UnavailableError(fmt::format("{}: {} rank {} ({}) failed: {}", description_, direction,
                                        request.peer, peers_[request.peer].Describe(),
                                        request.error_detail));
  }
  if (!request.is_send && request.received != request.length) {
    return InvalidArgumentError(fmt::format(
        "{}: rank {} sent {} bytes where this rank expected {} (tag {:#x}): the ranks called the "
        "operation with different counts",
        description_, request.peer, request.received, request.length, request.tag));
  }
  return OkStatus();
}

Status FabricTransfer::TimedOut() const {
  std::set<int> waiting;
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (states_[i] != State::kFree) waiting.insert(requests_[i]->peer);
  }
  return DeadlineExceededError(fmt::format(
      "{}: timed out after {} ms waiting for rank(s) {} ({} transfers outstanding): a peer is "
      "slow, dead, or called a different operation",
      description_, timeout_.count(), RankList(waiting), outstanding()));
}

Status FabricTransfer::CheckPeersAlive() const {
  std::set<int> waiting;
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (states_[i] != State::kFree) waiting.insert(requests_[i]->peer);
  }
  for (int peer : waiting) {
    if (PeerGone(peers_[peer])) {
      return UnavailableError(fmt::format("{}: rank {} ({}) died while this rank waited for it",
                                          description_, peer, peers_[peer].Describe()));
    }
  }
  return OkStatus();
}

void PollBackoff::Idle() {
  ++idle_polls_;
  if (idle_polls_ < kSpinPolls) return;
  if (idle_polls_ < kYieldPolls) {
    sched_yield();
    return;
  }
  // Naps grow from 10 us to 100 us: long enough to hand the core to a peer, short enough that
  // a message arriving meanwhile waits little.
  const int naps = std::min(idle_polls_ - kYieldPolls, 9);
  std::this_thread::sleep_for(std::chrono::microseconds(10 * (naps + 1)));
}

Status FabricTransfer::Poll(std::vector<uint64_t>* finished, bool* progressed) {
  if (!post_error_.ok()) return post_error_;
  // Retry posts the provider refused with -FI_EAGAIN, in order, until it refuses again.
  while (!retry_.empty()) {
    FabricRequest* request = retry_.front();
    retry_.pop_front();
    Post(request);
    if (states_[request->slot] == State::kRetry) {
      retry_.pop_back();  // Post queued it at the back: move it back to the front
      retry_.push_front(request);
      break;
    }
  }
  *progressed = endpoint_.Progress() > 0;
  std::vector<FabricRequest*> done;
  {
    std::lock_guard<std::mutex> lock(completed_mu_);
    done.swap(completed_);
  }
  Status first_error;
  for (FabricRequest* request : done) {
    states_[request->slot] = State::kFree;
    --in_flight_;
    free_.push_back(request);
    Status status = CheckFinished(*request);
    if (status.ok()) {
      finished->push_back(request->cookie);
    } else if (first_error.ok()) {
      first_error = std::move(status);
    }
  }
  if (!done.empty()) *progressed = true;
  return first_error;
}

Status FabricTransfer::CheckHealth() {
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline_) return TimedOut();
  if (now >= next_liveness_check_) {
    next_liveness_check_ = now + kLivenessPeriod;
    ZS_RETURN_IF_ERROR(CheckPeersAlive());
  }
  return OkStatus();
}

Status FabricTransfer::WaitSome(std::vector<uint64_t>* finished) {
  const size_t before = finished->size();
  while (true) {
    bool progressed = false;
    ZS_RETURN_IF_ERROR(Poll(finished, &progressed));
    if (finished->size() > before) {
      backoff_.Reset();
      return OkStatus();
    }
    if (outstanding() == 0) return OkStatus();
    if (progressed) backoff_.Reset();
    ZS_RETURN_IF_ERROR(CheckHealth());
    backoff_.Idle();
  }
}

Status FabricTransfer::WaitAll() {
  std::vector<uint64_t> finished;
  while (outstanding() > 0) {
    finished.clear();
    ZS_RETURN_IF_ERROR(WaitSome(&finished));
  }
  return OkStatus();
}

void FabricTransfer::Abandon() {
  for (FabricRequest* request : retry_) {
    states_[request->slot] = State::kFree;
  }
  retry_.clear();
  if (in_flight_ == 0) return;
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (states_[i] == State::kPosted) endpoint_.Cancel(requests_[i].get());
  }
  const auto grace = std::chrono::steady_clock::now() + kAbandonGrace;
  backoff_.Reset();
  while (in_flight_ > 0 && std::chrono::steady_clock::now() < grace) {
    endpoint_.Progress();
    std::vector<FabricRequest*> done;
    {
      std::lock_guard<std::mutex> lock(completed_mu_);
      done.swap(completed_);
    }
    for (FabricRequest* request : done) {
      states_[request->slot] = State::kFree;
      --in_flight_;
    }
    if (done.empty()) backoff_.Idle();
  }
  if (in_flight_ == 0) return;
  std::vector<std::unique_ptr<FabricRequest>> stuck;
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (states_[i] == State::kPosted) stuck.push_back(std::move(requests_[i]));
  }
  endpoint_.OrphanAll(this, &stuck, std::make_shared<std::vector<std::shared_ptr<void>>>(
                                        std::move(keep_alive_)));
}

}  // namespace zs
