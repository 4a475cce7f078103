#include "runtime/comm/blocking_call.h"
#include "runtime/comm/local/local_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "runtime/comm/host_reduce.h"
#include "runtime/comm/op_checks.h"

namespace zs::local {
namespace {

constexpr size_t kChunkAlign = 64;  // all_reduce chunk boundaries, in elements

std::byte* At(void* base, size_t index, size_t element) {
  return static_cast<std::byte*>(base) + index * element;
}
const std::byte* At(const void* base, size_t index, size_t element) {
  return static_cast<const std::byte*>(base) + index * element;
}

void Copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

}  // namespace

LocalCommunicator::LocalCommunicator(std::shared_ptr<SharedGroup> group, int rank,
                                     CommOptions options)
    : group_(std::move(group)), rank_(rank), options_(std::move(options)) {
  queue_ = std::make_unique<OpQueue>(
      fmt::format("local communicator of rank {} in group '{}'", rank_, options_.group_name));
}

LocalCommunicator::~LocalCommunicator() {
  queue_.reset();  // runs what is queued, joins the worker
  group_->MarkDead(rank_);
}

CommHandle LocalCommunicator::Enqueue(std::string description,
                                      std::function<Status(Clock::time_point)> fn) {
  return queue_->Submit(std::move(description), [this, fn = std::move(fn)] {
    Status status = fn(Clock::now() + options_.timeout);
    if (!status.ok()) group_->MarkFailed(rank_, status);
    return status;
  });
}

CommHandle LocalCommunicator::EnqueueCollective(CollectiveCall call, std::string what) {
  std::string description = what;
  return Enqueue(std::move(description),
                 [this, call, what = std::move(what)](Clock::time_point deadline) {
                   return RunCollective(call, what, deadline);
                 });
}

Status LocalCommunicator::Step(const std::string& what, Clock::time_point deadline) {
  const uint64_t step = ++step_;
  group_->Arrive(rank_, step);
  return group_->WaitAll(rank_, step, nullptr, deadline, options_.timeout, what);
}

Status LocalCommunicator::RunCollective(CollectiveCall call, const std::string& what,
                                        Clock::time_point deadline) {
  call.seq = ++seq_;
  const uint64_t arrive = ++step_;
  group_->Publish(rank_, call, arrive);
  ZS_RETURN_IF_ERROR(group_->WaitAll(rank_, arrive, &call, deadline, options_.timeout, what));
  auto peer = [&](int k) -> const CollectiveCall& { return group_->CallOf(k, call.seq); };
  const int n = size();
  const size_t element = DTypeSize(call.dtype);
  if (call.kind == CallKind::kAllToAll) {
    // Counts differ by rank, so every rank takes both steps whatever its own counts. Block p
    // comes from rank p's send buffer; starting at the next rank spreads the readers.
    const AllToAllLayout& mine = *call.layout;
    for (int i = 0; i < n; ++i) {
      const int p = (rank_ + i) % n;
      const CollectiveCall& theirs = peer(p);
      Copy(At(call.recv, mine.recv_offsets[p], element),
           At(theirs.send, theirs.layout->send_offsets[rank_], element),
           mine.recv_counts[p] * element);
    }
    return Step(what, deadline);
  }
  if (call.kind == CallKind::kBarrier || call.count == 0) return OkStatus();

  const size_t bytes = call.count * element;
  switch (call.kind) {
    case CallKind::kAllGather:
      for (int k = 0; k < n; ++k)
        Copy(At(call.recv, size_t(k) * call.count, element), peer(k).send, bytes);
      break;
    case CallKind::kReduceScatter: {
      std::vector<const void*> sources(n);
      for (int k = 0; k < n; ++k)
        sources[k] = At(peer(k).send, size_t(rank_) * call.count, element);
      ReduceSources(call.recv, sources.data(), n, call.count, call.dtype, call.op, n);
      break;
    }
    case CallKind::kAllReduce: {
      // Chunk c = [c * per, min((c + 1) * per, count)): reduced by rank c, then gathered.
      size_t per = (call.count + n - 1) / n;
      per = (per + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
      auto begin = [&](int c) { return std::min(call.count, size_t(c) * per); };
      auto length = [&](int c) { return begin(c + 1) - begin(c); };
      std::vector<const void*> sources(n);
      for (int k = 0; k < n; ++k) sources[k] = At(peer(k).send, begin(rank_), element);
      ReduceSources(At(call.recv, begin(rank_), element), sources.data(), n, length(rank_),
                    call.dtype, call.op, n);
      ZS_RETURN_IF_ERROR(Step(what, deadline));
      for (int c = 0; c < n; ++c) {
        if (c != rank_) {
          Copy(At(call.recv, begin(c), element), At(peer(c).recv, begin(c), element),
               length(c) * element);
        }
      }
      break;
    }
    case CallKind::kBroadcast:
      if (rank_ != call.root) Copy(call.recv, peer(call.root).recv, bytes);
      break;
    case CallKind::kBarrier:
    case CallKind::kSplit:
    case CallKind::kAllToAll:
      break;
  }
  return Step(what, deadline);
}

CommHandle LocalCommunicator::StartAllGather(const void* send, void* recv, size_t count,
                                             DType dtype) {
  std::string what = DescribeOp(*this, "all_gather", count, dtype);
  Status valid = CheckAllGatherArgs(*this, send, recv, count, dtype, what);
  if (!valid.ok()) return CommHandle::Completed(valid, what);
  CollectiveCall call{
      .kind = CallKind::kAllGather, .count = count, .dtype = dtype, .send = send, .recv = recv};
  return EnqueueCollective(call, std::move(what));
}

CommHandle LocalCommunicator::StartReduceScatter(const void* send, void* recv, size_t count,
                                                 DType dtype, ReduceOp op) {
  std::string what = DescribeOp(*this, "reduce_scatter", count, dtype, op);
  Status valid = CheckReduceScatterArgs(*this, send, recv, count, dtype, what);
  if (!valid.ok()) return CommHandle::Completed(valid, what);
  CollectiveCall call{.kind = CallKind::kReduceScatter,
                      .count = count,
                      .dtype = dtype,
                      .op = op,
                      .send = send,
                      .recv = recv};
  return EnqueueCollective(call, std::move(what));
}

CommHandle LocalCommunicator::StartAllReduce(const void* send, void* recv, size_t count,
                                             DType dtype, ReduceOp op) {
  std::string what = DescribeOp(*this, "all_reduce", count, dtype, op);
  Status valid = CheckAllReduceArgs(*this, send, recv, count, dtype, what);
  if (!valid.ok()) return CommHandle::Completed(valid, what);
  CollectiveCall call{.kind = CallKind::kAllReduce,
                      .count = count,
                      .dtype = dtype,
                      .op = op,
                      .send = send,
                      .recv = recv};
  return EnqueueCollective(call, std::move(what));
}

CommHandle LocalCommunicator::StartBroadcast(void* buffer, size_t count, DType dtype, int root) {
  std::string what =
      fmt::format("{} from root {}", DescribeOp(*this, "broadcast", count, dtype), root);
  Status valid = CheckBuffer(*this, "broadcast", buffer, count, what);
  if (valid.ok()) valid = CheckPeer(*this, root, what);
  if (!valid.ok()) return CommHandle::Completed(valid, what);
  CollectiveCall call{.kind = CallKind::kBroadcast,
                      .count = count,
                      .dtype = dtype,
                      .root = root,
                      .send = buffer,
                      .recv = buffer};
  return EnqueueCollective(call, std::move(what));
}

CommHandle LocalCommunicator::StartAllToAllv(const void* send, std::span<const size_t> send_counts,
                                             std::span<const size_t> send_offsets, void* recv,
                                             std::span<const size_t> recv_counts,
                                             std::span<const size_t> recv_offsets, DType dtype) {
  auto layout =
      std::make_shared<AllToAllLayout>(send_counts, send_offsets, recv_counts, recv_offsets);
  std::string what = DescribeAllToAll(*this, *layout, dtype);
  Status valid = CheckAllToAllArgs(*this, send, recv, *layout, dtype, what);
  if (!valid.ok()) return CommHandle::Completed(valid, what);
  CollectiveCall call{.kind = CallKind::kAllToAll,
                      .dtype = dtype,
                      .send = send,
                      .recv = recv,
                      .layout = std::move(layout)};
  return EnqueueCollective(call, std::move(what));
}

CommHandle LocalCommunicator::StartBarrier() {
  std::string what =
      fmt::format("barrier on group '{}' (rank {} of {})", group_name(), rank_, size());
  return Enqueue(what, [this, what](Clock::time_point deadline) {
    return RunCollective(CollectiveCall{.kind = CallKind::kBarrier}, what, deadline);
  });
}

CommHandle LocalCommunicator::StartSend(const void* buffer, size_t count, DType dtype, int peer) {
  std::string what = fmt::format("{} to rank {}", DescribeOp(*this, "send", count, dtype), peer);
  Status valid = CheckBuffer(*this, "send", buffer, count, what);
  if (valid.ok()) valid = CheckPeer(*this, peer, what);
  if (valid.ok() && peer == rank_) {
    valid = InvalidArgumentError(fmt::format("{}: a rank cannot send to itself", what));
  }
  if (!valid.ok()) return CommHandle::Completed(valid, what);
  return Enqueue(what, [=, this](Clock::time_point) {
    return group_->Send(rank_, peer, buffer, count, dtype, options_.tracker, what);
  });
}

CommHandle LocalCommunicator::StartRecv(void* buffer, size_t count, DType dtype, int peer) {
  std::string what = fmt::format("{} from rank {}", DescribeOp(*this, "recv", count, dtype), peer);
  Status valid = CheckBuffer(*this, "recv", buffer, count, what);
  if (valid.ok()) valid = CheckPeer(*this, peer, what);
  if (valid.ok() && peer == rank_) {
    valid = InvalidArgumentError(fmt::format("{}: a rank cannot receive from itself", what));
  }
  if (!valid.ok()) return CommHandle::Completed(valid, what);
  return Enqueue(what, [=, this](Clock::time_point deadline) {
    return group_->Recv(rank_, peer, buffer, count, dtype, deadline, options_.timeout, what);
  });
}

Status LocalCommunicator::RunSplit(int color, int key, std::string name, const std::string& what,
                                   Clock::time_point deadline,
                                   std::unique_ptr<Communicator>* result) {
  CollectiveCall call{.kind = CallKind::kSplit, .color = color, .key = key};
  call.seq = ++seq_;
  const uint64_t arrive = ++step_;
  group_->Publish(rank_, call, arrive);
  ZS_RETURN_IF_ERROR(group_->WaitAll(rank_, arrive, &call, deadline, options_.timeout, what));
  if (color < 0) return OkStatus();
  std::vector<std::pair<int, int>> members;  // (key, parent rank)
  for (int k = 0; k < size(); ++k) {
    const CollectiveCall& theirs = group_->CallOf(k, call.seq);
    if (theirs.color == color) members.emplace_back(theirs.key, k);
  }
  std::sort(members.begin(), members.end());
  const int new_rank =
      int(std::find(members.begin(), members.end(), std::make_pair(key, rank_)) - members.begin());
  const int new_size = int(members.size());
  CommOptions options = options_;
  options.group_name = name;
  std::shared_ptr<SharedGroup> child =
      group_->TakeChild(call.seq, color, new_size, std::move(name));
  *result = std::make_unique<LocalCommunicator>(std::move(child), new_rank, std::move(options));
  return OkStatus();
}

StatusOr<std::unique_ptr<Communicator>> LocalCommunicator::Split(int color, int key,
                                                                 std::string name) {
  std::string what = fmt::format("split(color={}, key={}, name='{}') on group '{}' (rank {} of {})",
                                 color, key, name, group_name(), rank_, size());
  // Waited at once: a blocking call, so an idle queue builds the child on this thread, whose
  // CPU binding the child's worker inherits (blocking_call.h).
  BlockingCallScope blocking;
  auto result = std::make_shared<std::unique_ptr<Communicator>>();
  CommHandle handle = Enqueue(
      what, [this, color, key, name = std::move(name), what, result](Clock::time_point deadline) {
        return RunSplit(color, key, name, what, deadline, result.get());
      });
  ZS_RETURN_IF_ERROR(handle.Wait());
  return std::move(*result);
}

}  // namespace zs::local
