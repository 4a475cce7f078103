#include "runtime/comm/local/shared_group.h"

#include <fmt/format.h>

#include <cstring>

#include "runtime/base/check.h"

namespace zs::local {
namespace {

// Before sleeping on the condition variable a waiter polls the arrival counters for a short
// while: a rendezvous between running threads then costs no system call. Kept short because
// ranks-as-threads often outnumber the cores.
constexpr int kSpinPolls = 2000;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::string_view CallKindName(CallKind kind) {
  switch (kind) {
    case CallKind::kAllGather:
      return "all_gather";
    case CallKind::kReduceScatter:
      return "reduce_scatter";
    case CallKind::kAllReduce:
      return "all_reduce";
    case CallKind::kBroadcast:
      return "broadcast";
    case CallKind::kBarrier:
      return "barrier";
    case CallKind::kSplit:
      return "split";
    case CallKind::kAllToAll:
      return "all_to_all_v";
  }
  return "?";
}

std::string RankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace

std::string DescribeCall(const CollectiveCall& call) {
  switch (call.kind) {
    case CallKind::kAllGather:
      return fmt::format("all_gather(count={}, {})", call.count, DTypeName(call.dtype));
    case CallKind::kReduceScatter:
    case CallKind::kAllReduce:
      return fmt::format("{}(count={}, {}, {})", CallKindName(call.kind), call.count,
                         DTypeName(call.dtype), ReduceOpName(call.op));
    case CallKind::kBroadcast:
      return fmt::format("broadcast(count={}, {}, root={})", call.count, DTypeName(call.dtype),
                         call.root);
    case CallKind::kBarrier:
      return "barrier()";
    case CallKind::kSplit:
      return fmt::format("split(color={}, key={})", call.color, call.key);
    case CallKind::kAllToAll:
      return fmt::format("all_to_all_v(send={}, recv={}, {})", call.layout->send_total(),
                         call.layout->recv_total(), DTypeName(call.dtype));
  }
  return "?";
}

bool CallsMatch(const CollectiveCall& a, const CollectiveCall& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case CallKind::kBarrier:
    case CallKind::kSplit:
      return true;
    case CallKind::kAllGather:
      return a.count == b.count && a.dtype == b.dtype;
    case CallKind::kReduceScatter:
    case CallKind::kAllReduce:
      return a.count == b.count && a.dtype == b.dtype && a.op == b.op;
    case CallKind::kBroadcast:
      return a.count == b.count && a.dtype == b.dtype && a.root == b.root;
    case CallKind::kAllToAll:
      return a.dtype == b.dtype;
  }
  return false;
}

SharedGroup::SharedGroup(std::string name, int world)
    : name_(std::move(name)), world_(world), channels_(size_t(world) * world) {
  ZS_CHECK(world >= 1, "group '{}' needs at least one rank, got {}", name_, world);
  for (int r = 0; r < world; ++r) ranks_.push_back(std::make_unique<RankState>());
}

SharedGroup::~SharedGroup() {
  for (Channel& channel : channels_) {
    for (Message& message : channel.pending) FreeMessage(message);
  }
}

void SharedGroup::Publish(int rank, const CollectiveCall& call, uint64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranks_[rank]->calls[call.seq % 2] = call;
    ranks_[rank]->arrived.store(step, std::memory_order_release);
  }
  cv_.notify_all();
}

void SharedGroup::Arrive(int rank, uint64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranks_[rank]->arrived.store(step, std::memory_order_release);
  }
  cv_.notify_all();
}

const CollectiveCall& SharedGroup::CallOf(int rank, uint64_t seq) const {
  const CollectiveCall& call = ranks_[rank]->calls[seq % 2];
  ZS_DCHECK(call.seq == seq, "rank {} of group '{}' holds collective {}, not {}", rank, name_,
            call.seq, seq);
  return call;
}

bool SharedGroup::AllArrived(uint64_t step) const {
  for (const auto& r : ranks_) {
    if (r->arrived.load(std::memory_order_acquire) < step) return false;
  }
  return true;
}

Status SharedGroup::CheckCalls(int rank, uint64_t step, const CollectiveCall& mine) const {
  for (int k = 0; k < world_; ++k) {
    if (k == rank || ranks_[k]->arrived.load(std::memory_order_acquire) < step) continue;
    const CollectiveCall& theirs = ranks_[k]->calls[mine.seq % 2];
    if (!CallsMatch(mine, theirs)) {
      return InvalidArgumentError(fmt::format(
          "mismatched collective #{} on group '{}': rank {} called {} but rank {} called {}",
          mine.seq, name_, rank, DescribeCall(mine), k, DescribeCall(theirs)));
    }
  }
  if (mine.kind != CallKind::kAllToAll) return OkStatus();
  // all_to_all: every pair of arrived ranks, not only this rank's pairs, so that a mismatch
  // stops every rank at the arrive step; none then reads a buffer of a rank that failed (and
  // may have freed it).
  for (int j = 0; j < world_; ++j) {
    if (ranks_[j]->arrived.load(std::memory_order_acquire) < step) continue;
    const AllToAllLayout& a = *ranks_[j]->calls[mine.seq % 2].layout;
    for (int k = j + 1; k < world_; ++k) {
      if (ranks_[k]->arrived.load(std::memory_order_acquire) < step) continue;
      const AllToAllLayout& b = *ranks_[k]->calls[mine.seq % 2].layout;
      auto what = [&] { return fmt::format("all_to_all_v (collective #{})", mine.seq); };
      if (a.send_counts[k] != b.recv_counts[j]) {
        return AllToAllCountMismatch(what(), name_, j, a.send_counts[k], k, b.recv_counts[j]);
      }
      if (b.send_counts[j] != a.recv_counts[k]) {
        return AllToAllCountMismatch(what(), name_, k, b.send_counts[j], j, a.recv_counts[k]);
      }
    }
  }
  return OkStatus();
}

Status SharedGroup::PeerGone(int peer, std::string_view what) const {
  const RankState& r = *ranks_[peer];
  if (r.dead) {
    return UnavailableError(
        fmt::format("{}: rank {} of group '{}' is gone (its communicator was "
                    "destroyed)",
                    what, peer, name_));
  }
  if (r.failed) {
    return AbortedError(fmt::format("{}: rank {} of group '{}' failed earlier: {}", what, peer,
                                    name_, r.failure.ToString()));
  }
  return OkStatus();
}

std::string SharedGroup::Missing(uint64_t step) const {
  std::vector<int> missing;
  for (int k = 0; k < world_; ++k) {
    if (ranks_[k]->arrived.load(std::memory_order_acquire) < step) missing.push_back(k);
  }
  return RankList(missing);
}

Status SharedGroup::WaitAll(int rank, uint64_t step, const CollectiveCall* mine,
                            Clock::time_point deadline, std::chrono::milliseconds timeout,
                            std::string_view what) {
  for (int i = 0; i < kSpinPolls; ++i) {
    if (AllArrived(step)) return mine != nullptr ? CheckCalls(rank, step, *mine) : OkStatus();
    CpuRelax();
  }
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (mine != nullptr) ZS_RETURN_IF_ERROR(CheckCalls(rank, step, *mine));
    bool all = true;
    for (int k = 0; k < world_; ++k) {
      if (ranks_[k]->arrived.load(std::memory_order_acquire) >= step) continue;
      all = false;
      ZS_RETURN_IF_ERROR(PeerGone(k, what));
    }
    if (all) return OkStatus();
    if (Clock::now() >= deadline) {
      return DeadlineExceededError(
          fmt::format("{}: timed out after {} ms on group '{}' waiting for {} (collective step {})",
                      what, timeout.count(), name_, Missing(step), step));
    }
    cv_.wait_until(lock, deadline);
  }
}

void SharedGroup::FreeMessage(Message& message) {
  if (message.tracker != nullptr && message.bytes > 0) {
    message.tracker->Sub(MemoryTier::kHost, MemoryCategory::kCommBuffers, int64_t(message.bytes));
  }
  message.tracker = nullptr;
  message.data.reset();
}

Status SharedGroup::Send(int src, int dst, const void* buffer, size_t count, DType dtype,
                         MemoryTracker* tracker, std::string_view what) {
  const size_t bytes = count * DTypeSize(dtype);
  std::unique_lock<std::mutex> lock(mu_);
  ZS_RETURN_IF_ERROR(PeerGone(dst, what));
  Channel& channel = ChannelOf(src, dst);
  if (channel.waiting != nullptr && channel.pending.empty()) {
    // The receiver waits for exactly this message (earlier ones were all taken): copy straight
    // into its buffer. With messages pending, the receiver takes those first, in order.
    RecvPost* post = channel.waiting;
    channel.waiting = nullptr;
    if (post->count != count || post->dtype != dtype) {
      Status error = InvalidArgumentError(fmt::format(
          "mismatched send/recv on group '{}': rank {} sends (count={}, {}) but rank {} "
          "receives (count={}, {})",
          name_, src, count, DTypeName(dtype), dst, post->count, DTypeName(post->dtype)));
      post->state = RecvPost::kDone;
      post->status = error;
      lock.unlock();
      cv_.notify_all();
      return error;
    }
    post->state = RecvPost::kFilling;
    lock.unlock();
    if (bytes > 0) std::memcpy(post->buffer, buffer, bytes);
    lock.lock();
    post->state = RecvPost::kDone;
    lock.unlock();
    cv_.notify_all();
    return OkStatus();
  }
  lock.unlock();
  Message message;
  message.count = count;
  message.dtype = dtype;
  message.bytes = bytes;
  if (bytes > 0) {
    message.data.reset(new std::byte[bytes]);
    std::memcpy(message.data.get(), buffer, bytes);
    message.tracker = tracker;
    if (tracker != nullptr) {
      tracker->Add(MemoryTier::kHost, MemoryCategory::kCommBuffers, int64_t(bytes));
    }
  }
  lock.lock();
  if (Status gone = PeerGone(dst, what); !gone.ok()) {  // it went away while we copied
    FreeMessage(message);
    return gone;
  }
  channel.pending.push_back(std::move(message));
  lock.unlock();
  cv_.notify_all();
  return OkStatus();
}

Status SharedGroup::Recv(int dst, int src, void* buffer, size_t count, DType dtype,
                         Clock::time_point deadline, std::chrono::milliseconds timeout,
                         std::string_view what) {
  std::unique_lock<std::mutex> lock(mu_);
  Channel& channel = ChannelOf(src, dst);
  RecvPost post{buffer, count, dtype, RecvPost::kWaiting, OkStatus()};
  bool posted = false;
  while (true) {
    if (posted && post.state == RecvPost::kDone) return post.status;
    if (post.state == RecvPost::kWaiting && !channel.pending.empty()) {
      if (posted) channel.waiting = nullptr;
      Message message = std::move(channel.pending.front());
      channel.pending.pop_front();
      lock.unlock();
      Status status;
      if (message.count != count || message.dtype != dtype) {
        status = InvalidArgumentError(fmt::format(
            "mismatched send/recv on group '{}': rank {} sent (count={}, {}) but rank {} "
            "receives (count={}, {})",
            name_, src, message.count, DTypeName(message.dtype), dst, count, DTypeName(dtype)));
      } else if (message.bytes > 0) {
        std::memcpy(buffer, message.data.get(), message.bytes);
      }
      lock.lock();  // the tracker pointer is cleared under mu_ when the sender goes away
      FreeMessage(message);
      return status;
    }
    if (post.state == RecvPost::kWaiting) {
      Status gone = PeerGone(src, what);
      if (!gone.ok() || Clock::now() >= deadline) {
        if (posted) channel.waiting = nullptr;
        if (!gone.ok()) return gone;
        return DeadlineExceededError(
            fmt::format("{}: timed out after {} ms on group '{}' "
                        "waiting for a send from rank {}",
                        what, timeout.count(), name_, src));
      }
      if (!posted) {
        ZS_CHECK(channel.waiting == nullptr, "two receives from rank {} wait at rank {}", src, dst);
        channel.waiting = &post;
        posted = true;
      }
      cv_.wait_until(lock, deadline);
    } else {
      cv_.wait(lock);  // kFilling: the sender is copying; it finishes without waiting
    }
  }
}

void SharedGroup::MarkFailed(int rank, const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    RankState& r = *ranks_[rank];
    if (!r.failed) {
      r.failed = true;
      r.failure = status;
    }
  }
  cv_.notify_all();
}

void SharedGroup::MarkDead(int rank) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranks_[rank]->dead = true;
    for (int k = 0; k < world_; ++k) {
      // Messages the dead rank sent stay receivable, but its tracker may go away with it.
      for (Message& message : ChannelOf(rank, k).pending) {
        if (message.tracker != nullptr && message.bytes > 0) {
          message.tracker->Sub(MemoryTier::kHost, MemoryCategory::kCommBuffers,
                               int64_t(message.bytes));
        }
        message.tracker = nullptr;
      }
      // Messages to it will never be received.
      Channel& incoming = ChannelOf(k, rank);
      for (Message& message : incoming.pending) FreeMessage(message);
      incoming.pending.clear();
    }
  }
  cv_.notify_all();
}

std::shared_ptr<SharedGroup> SharedGroup::TakeChild(uint64_t seq, int color, int size,
                                                    std::string name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto key = std::make_pair(seq, color);
  ChildEntry& entry = children_[key];
  if (entry.group == nullptr) entry.group = std::make_shared<SharedGroup>(std::move(name), size);
  std::shared_ptr<SharedGroup> group = entry.group;
  if (++entry.taken == size) children_.erase(key);
  return group;
}

}  // namespace zs::local
