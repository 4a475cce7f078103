#include "runtime/comm/blocking_call.h"
#include "runtime/comm/fabric/fabric_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "runtime/base/splitmix64.h"
#include "runtime/comm/fabric/fabric_stream_set.h"
#include "runtime/comm/fabric/fabric_transfer.h"
#include "runtime/comm/host_reduce.h"
#include "runtime/comm/op_checks.h"

namespace zs {

namespace {

constexpr int kCommIdCandidates = 64;

void Copy(char* dst, const char* src, size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

}  // namespace

// One send or receive in flight on the point-to-point thread.
struct FabricCommunicator::PointToPointOp {
  std::shared_ptr<CommWork> work;
  bool is_send = false;
  void* buffer = nullptr;
  size_t bytes = 0;
  int peer = 0;
  uint32_t seq = 0;
  std::unique_ptr<FabricTransfer> transfer;
  std::unique_ptr<FabricStreamSet> streams;
};

// The blocks of a reduction, in bytes: block p starts at offset[p] of the input and has
// bytes[p] bytes (the last ones may be short or empty for an all-reduce).
struct FabricCommunicator::Blocks {
  std::vector<size_t> offset;
  std::vector<size_t> bytes;
};

FabricCommunicator::FabricCommunicator(std::shared_ptr<FabricEndpoint> endpoint, uint16_t comm_id,
                                       int rank, std::vector<int> world_ranks,
                                       std::vector<FabricPeer> peers, CommOptions options,
                                       FabricTuning tuning)
    : endpoint_(std::move(endpoint)),
      comm_id_(comm_id),
      rank_(rank),
      world_ranks_(std::move(world_ranks)),
      peers_(std::move(peers)),
      liveness_(std::make_unique<PeerLiveness>(peers_, std::chrono::milliseconds(1))),
      options_(std::move(options)),
      tuning_(tuning),
      send_seq_(world_ranks_.size(), 0),
      recv_seq_(world_ranks_.size(), 0),
      queue_(std::in_place, fmt::format("fabric communicator of group '{}' (rank {})",
                                        options_.group_name, rank)) {
  for (int w : world_ranks_) addresses_.push_back(endpoint_->peer_address(w));
  if (tuning_.direct_copy) {
    for (const FabricPeer& peer : peers_) pull_pids_.push_back(peer.pid);
  }
}

FabricCommunicator::~FabricCommunicator() {
  queue_.reset();  // runs what is still queued, joins the worker
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    p2p_stopping_ = true;
  }
  p2p_cv_.notify_all();
  if (p2p_thread_.joinable()) p2p_thread_.join();
  if (options_.tracker != nullptr && scratch_bytes_ > 0) {
    options_.tracker->Sub(MemoryTier::kHost, MemoryCategory::kCommBuffers, int64_t(scratch_bytes_));
  }
  if (comm_id_ != 0) endpoint_->ReleaseCommId(comm_id_);
}

uint64_t FabricCommunicator::Tag(OpKind kind, uint32_t seq, int src) const {
  return (uint64_t(comm_id_) << 52) | (uint64_t(kind) << 48) | (uint64_t(seq & 0xffff) << 32) |
         (uint64_t(src) << 20);
}

FabricStreamTags FabricCommunicator::Tags(OpKind kind, uint32_t seq, int sender,
                                          int receiver) const {
  // Clear-to-send messages get kinds of their own, three so that every such tag is unique:
  // point-to-point numbers its messages per pair, the collectives share next_seq_, and an
  // all-reduce streams to each peer twice (kAllReduceReduce and kAllReduceGather).
  const OpKind cts_kind = kind == OpKind::kPointToPoint      ? OpKind::kClearToSendPointToPoint
                          : kind == OpKind::kAllReduceGather ? OpKind::kClearToSendGather
                                                             : OpKind::kClearToSend;
  return FabricStreamTags{Tag(kind, seq, sender), Tag(cts_kind, seq, receiver)};
}

size_t FabricCommunicator::SegmentBytes(size_t largest_message, bool direct) const {
  // Every rank computes the same size from the same counts, so segment numbers agree.
  const size_t needed = (largest_message + kFabricMaxSegments - 1) / kFabricMaxSegments;
  const size_t base = direct && tuning_.direct_copy ? tuning_.direct_segment_bytes
                                                    : tuning_.segment_bytes;
  return std::max(base, (needed + 63) / 64 * 64);
}

std::unique_ptr<FabricTransfer> FabricCommunicator::NewTransfer(
    const std::string& description) const {
  return std::make_unique<FabricTransfer>(*endpoint_, addresses_, peers_, description,
                                          options_.timeout, liveness_.get());
}

FabricStreamSet FabricCommunicator::NewStreams(FabricTransfer& transfer, size_t segment) const {
  return FabricStreamSet(transfer, segment, tuning_.window, tuning_.rendezvous_bytes, pull_pids_,
                         tuning_.direct_window);
}

char* FabricCommunicator::Scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    if (options_.tracker != nullptr) {
      options_.tracker->Sub(MemoryTier::kHost, MemoryCategory::kCommBuffers,
                            int64_t(scratch_bytes_));
      options_.tracker->Add(MemoryTier::kHost, MemoryCategory::kCommBuffers, int64_t(bytes));
    }
    scratch_.reset(new char[bytes]);
    // Touch every page once here, so the first collective does not pay the page faults.
    std::memset(scratch_.get(), 0, bytes);
    scratch_bytes_ = bytes;
  }
  return scratch_.get();
}

// ---- operations (the OpQueue's running thread) ----------------------------------------------------------

Status FabricCommunicator::RunAllGather(const std::string& description, OpKind kind, uint32_t seq,
                                        const void* send, void* recv, size_t bytes) {
  char* out = static_cast<char*>(recv);
  auto copy_own_block = [&] {
    if (bytes > 0 && send != out + size_t(rank_) * bytes) {
      std::memcpy(out + size_t(rank_) * bytes, send, bytes);
    }
  };
  if (bytes == 0 || size() == 1) {
    copy_own_block();
    return OkStatus();
  }
  auto transfer = NewTransfer(description);
  FabricStreamSet streams = NewStreams(*transfer, SegmentBytes(bytes, /*direct=*/true));
  for (int p = 0; p < size(); ++p) {
    if (p == rank_) continue;
    streams.Add(false, p, out + size_t(p) * bytes, bytes, Tags(kind, seq, p, rank_));
    streams.Add(true, p, send, bytes, Tags(kind, seq, rank_, p));
  }
  // The first segments go out before the own block is copied: peers (which read `send`, not
  // `out`) can start on them meanwhile.
  streams.PumpAll();
  copy_own_block();
  while (!streams.AllDone()) {
    ZS_RETURN_IF_ERROR(streams.Step([](int, int) {}));
  }
  return OkStatus();
}

Status FabricCommunicator::RunReduce(const std::string& description, uint32_t seq, const void* send,
                                     void* recv, const Blocks& blocks, DType dtype, ReduceOp op,
                                     bool all_gather) {
  const int n = size();
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  // The reduce-scatter output of this rank: the output buffer itself for reduce-scatter, this
  // rank's block of it for all-reduce.
  char* own = all_gather ? out + blocks.offset[rank_] : out;
  const size_t own_bytes = blocks.bytes[rank_];
  const size_t largest = *std::max_element(blocks.bytes.begin(), blocks.bytes.end());
  if (largest == 0) return OkStatus();
  const size_t segment = SegmentBytes(largest);
  const int ring = tuning_.window;
  const size_t esize = DTypeSize(dtype);
  char* scratch = Scratch(size_t(n - 1) * size_t(ring) * segment);

  auto transfer = NewTransfer(description);
  transfer->KeepAliveIfOrphaned(scratch_);
  FabricStreamSet streams = NewStreams(*transfer, segment);
  const OpKind reduce_kind = all_gather ? OpKind::kAllReduceReduce : OpKind::kReduceScatter;
  std::vector<int> ring_of(n, -1);  // peer -> ring index in scratch
  std::vector<int> reduce_recv;     // stream ids gated by the reduction
  std::vector<int> gather_send;     // stream ids gated by the reduction
  for (int p = 0, q = 0; p < n; ++p) {
    if (p == rank_) continue;
    ring_of[p] = q;
    char* ring_base = scratch + size_t(q++) * size_t(ring) * segment;
    streams.Add(true, p, in + blocks.offset[p], blocks.bytes[p], Tags(reduce_kind, seq, rank_, p));
    const int r =
        streams.Add(false, p, ring_base, own_bytes, Tags(reduce_kind, seq, p, rank_), ring);
    streams[r].limit = ring;
    reduce_recv.push_back(r);
    if (all_gather) {
      const int g =
          streams.Add(true, p, own, own_bytes, Tags(OpKind::kAllReduceGather, seq, rank_, p));
      streams[g].limit = 0;
      gather_send.push_back(g);
      streams.Add(false, p, out + blocks.offset[p], blocks.bytes[p],
                  Tags(OpKind::kAllReduceGather, seq, p, rank_));
    }
  }
  std::vector<char> is_reduce_recv(streams.size(), 0);  // by stream id
  for (int r : reduce_recv) is_reduce_recv[r] = 1;

  const int own_segments = int((own_bytes + segment - 1) / segment);
  std::vector<int> arrived(own_segments, 0);
  std::vector<const void*> sources(n);
  int reduced = 0;
  auto reduce_ready = [&] {
    while (reduced < own_segments && arrived[reduced] == n - 1) {
      const size_t offset = size_t(reduced) * segment;
      const size_t length = std::min(segment, own_bytes - offset);
      for (int k = 0; k < n; ++k) {
        sources[k] = k == rank_ ? in + blocks.offset[rank_] + offset
                                : scratch + (size_t(ring_of[k]) * ring + reduced % ring) * segment;
      }
      ReduceSources(own + offset, sources.data(), n, length / esize, dtype, op, n);
      ++reduced;
      for (int r : reduce_recv) streams[r].limit = reduced + ring;
      for (int g : gather_send) streams[g].limit = reduced;
    }
  };
  reduce_ready();
  streams.PumpAll();
  while (!streams.AllDone() || reduced < own_segments) {
    ZS_RETURN_IF_ERROR(streams.Step([&](int index, int seg) {
      if (is_reduce_recv[index]) {
        ++arrived[seg];
        reduce_ready();
      }
    }));
  }
  return OkStatus();
}

Status FabricCommunicator::RunBroadcast(const std::string& description, uint32_t seq, void* buffer,
                                        size_t bytes, int root) {
  const int n = size();
  if (bytes == 0 || n == 1) return OkStatus();
  // A chain root -> root+1 -> ...: every segment crosses each link once, and a rank forwards a
  // segment as soon as it has it.
  const int position = (rank_ - root + n) % n;
  const int prev = (rank_ - 1 + n) % n, next = (rank_ + 1) % n;
  auto transfer = NewTransfer(description);
  FabricStreamSet streams = NewStreams(*transfer, SegmentBytes(bytes));
  int recv_stream = -1, send_stream = -1;
  if (position > 0) {
    recv_stream =
        streams.Add(false, prev, buffer, bytes, Tags(OpKind::kBroadcast, seq, prev, rank_));
  }
  if (position < n - 1) {
    send_stream =
        streams.Add(true, next, buffer, bytes, Tags(OpKind::kBroadcast, seq, rank_, next));
    if (position > 0) streams[send_stream].limit = 0;
  }
  std::vector<char> have(recv_stream >= 0 ? streams[recv_stream].segments : 0, 0);
  int contiguous = 0;
  streams.PumpAll();
  while (!streams.AllDone()) {
    ZS_RETURN_IF_ERROR(streams.Step([&](int index, int seg) {
      if (index != recv_stream) return;
      have[seg] = 1;
      while (contiguous < int(have.size()) && have[contiguous]) ++contiguous;
      if (send_stream >= 0) streams[send_stream].limit = contiguous;
    }));
  }
  return OkStatus();
}

Status FabricCommunicator::RunAllToAll(const std::string& description, uint32_t seq,
                                       const void* send, void* recv, const AllToAllLayout& layout,
                                       DType dtype) {
  const int n = size();
  const size_t esize = DTypeSize(dtype);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  Copy(out + layout.recv_offsets[rank_] * esize, in + layout.send_offsets[rank_] * esize,
       layout.recv_counts[rank_] * esize);
  if (n == 1) return OkStatus();
  auto transfer = NewTransfer(description);

  // Phase 1: the counts of every pair, both directions.
  struct Counts {
    uint64_t sends;    // elements the sender sends to the receiver
    uint64_t expects;  // elements the sender expects from the receiver
  };
  // Shared with the transfer: requests the provider never completes (a failed exchange) may
  // still point into them after this returns.
  auto counts = std::make_shared<std::vector<Counts>>(2 * size_t(n));
  transfer->KeepAliveIfOrphaned(counts);
  Counts* mine = counts->data();
  Counts* theirs = mine + n;
  for (int p = 0; p < n; ++p) {
    if (p == rank_) continue;
    mine[p] = Counts{layout.send_counts[p], layout.recv_counts[p]};
    transfer->Recv(p, &theirs[p], sizeof(Counts), Tag(OpKind::kAllToAllCounts, seq, p), 0);
    transfer->Send(p, &mine[p], sizeof(Counts), Tag(OpKind::kAllToAllCounts, seq, rank_), 0);
  }
  ZS_RETURN_IF_ERROR(transfer->WaitAll());
  Status mismatch;
  std::vector<char> agreed(n, 1);
  for (int p = 0; p < n; ++p) {
    if (p == rank_) continue;
    Status pair;
    if (theirs[p].sends != layout.recv_counts[p]) {
      pair = AllToAllCountMismatch(description, group_name(), p, theirs[p].sends, rank_,
                                   layout.recv_counts[p]);
    } else if (theirs[p].expects != layout.send_counts[p]) {
      pair = AllToAllCountMismatch(description, group_name(), rank_, layout.send_counts[p], p,
                                   theirs[p].expects);
    }
    if (!pair.ok()) {
      agreed[p] = 0;  // the peer sees the same two counts and skips this pair too
      if (mismatch.ok()) mismatch = pair;
    }
  }

  // Phase 2: the blocks of every pair that agreed.
  const size_t segment =
      tuning_.direct_copy ? tuning_.direct_segment_bytes : tuning_.segment_bytes;
  FabricStreamSet streams = NewStreams(*transfer, segment);
  for (int i = 1; i < n; ++i) {
    const int p = (rank_ + i) % n;  // start with the next rank: spreads the load
    if (!agreed[p]) continue;
    const size_t send_bytes = layout.send_counts[p] * esize;
    const size_t recv_bytes = layout.recv_counts[p] * esize;
    if (std::max(send_bytes, recv_bytes) / segment >= size_t(kFabricMaxSegments)) {
      return InvalidArgumentError(fmt::format(
          "{}: a block of {} bytes to or from rank {} needs more than {} segments of {} bytes",
          description, std::max(send_bytes, recv_bytes), p, kFabricMaxSegments, segment));
    }
    streams.Add(false, p, out + layout.recv_offsets[p] * esize, recv_bytes,
                Tags(OpKind::kAllToAll, seq, p, rank_));
    streams.Add(true, p, in + layout.send_offsets[p] * esize, send_bytes,
                Tags(OpKind::kAllToAll, seq, rank_, p));
  }
  streams.PumpAll();
  while (!streams.AllDone()) {
    ZS_RETURN_IF_ERROR(streams.Step([](int, int) {}));
  }
  return mismatch;
}

Status FabricCommunicator::BrokenStatus(const std::string& description) const {
  std::lock_guard<std::mutex> lock(broken_mu_);
  if (broken_.ok()) return OkStatus();
  return AbortedError(
      fmt::format("{} not run: the fabric communicator of group '{}' is unusable "
                  "after an earlier failure: {}",
                  description, group_name(), broken_.ToString()));
}

void FabricCommunicator::MarkBroken(const Status& status) {
  std::lock_guard<std::mutex> lock(broken_mu_);
  if (broken_.ok()) broken_ = status;
}

Status FabricCommunicator::Guarded(const std::string& description,
                                   const std::function<Status()>& run) {
  ZS_RETURN_IF_ERROR(BrokenStatus(description));
  Status status = run();
  if (!status.ok()) MarkBroken(status);
  return status;
}

CommHandle FabricCommunicator::StartPointToPoint(std::string description, bool is_send,
                                                 void* buffer, size_t bytes, int peer,
                                                 uint32_t seq) {
  Status broken = BrokenStatus(description);
  if (!broken.ok()) return CommHandle::Completed(broken, description);
  auto op = std::make_unique<PointToPointOp>();
  op->work = std::make_shared<CommWork>(std::move(description));
  op->is_send = is_send;
  op->buffer = buffer;
  op->bytes = bytes;
  op->peer = peer;
  op->seq = seq;
  CommHandle handle(op->work);
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    p2p_pending_.push_back(std::move(op));
  }
  if (!p2p_thread_.joinable()) p2p_thread_ = std::thread([this] { PointToPointLoop(); });
  p2p_cv_.notify_one();
  return handle;
}

void FabricCommunicator::PointToPointLoop() {
  std::vector<std::unique_ptr<PointToPointOp>> active;
  PollBackoff backoff;
  auto finish = [&](size_t i, Status status) {
    active[i]->streams.reset();
    active[i]->transfer.reset();  // cancels what is still posted
    active[i]->work->Complete(std::move(status));
    active.erase(active.begin() + long(i));
  };
  while (true) {
    std::vector<std::unique_ptr<PointToPointOp>> fresh;
    {
      std::unique_lock<std::mutex> lock(p2p_mu_);
      if (active.empty()) {
        p2p_cv_.wait(lock, [&] { return p2p_stopping_ || !p2p_pending_.empty(); });
      }
      if (p2p_stopping_ && active.empty() && p2p_pending_.empty()) return;
      while (!p2p_pending_.empty()) {
        fresh.push_back(std::move(p2p_pending_.front()));
        p2p_pending_.pop_front();
      }
    }
    for (auto& op : fresh) {
      Status broken = BrokenStatus(op->work->description());
      if (!broken.ok()) {
        op->work->Complete(broken);
        continue;
      }
      // The deadline of a point-to-point operation runs from here, when it starts.
      op->transfer = NewTransfer(op->work->description());
      op->streams = std::make_unique<FabricStreamSet>(
          NewStreams(*op->transfer, SegmentBytes(op->bytes, /*direct=*/true)));
      const int sender = op->is_send ? rank_ : op->peer;
      const int receiver = op->is_send ? op->peer : rank_;
      op->streams->Add(op->is_send, op->peer, op->buffer, op->bytes,
                       Tags(OpKind::kPointToPoint, op->seq, sender, receiver));
      op->streams->PumpAll();
      active.push_back(std::move(op));
    }
    bool any_progress = false;
    Status failure;
    for (size_t i = 0; i < active.size();) {
      bool progressed = false;
      Status status = active[i]->streams->Poll(&progressed);
      any_progress = any_progress || progressed;
      // Health (deadline, dead peers) is checked whenever the operation is not done, even when
      // the poll progressed: completions of other requests on the shared endpoint count as
      // progress, so a send/recv whose peer never answers would otherwise outlive its timeout
      // while other traffic flows. CheckHealth is cheap: a clock read, and the liveness check
      // is rate-limited inside FabricTransfer.
      if (status.ok() && !active[i]->streams->AllDone()) {
        status = active[i]->transfer->CheckHealth();
      }
      if (!status.ok()) {
        MarkBroken(status);
        failure = status;
        finish(i, std::move(status));
      } else if (active[i]->streams->AllDone()) {
        finish(i, OkStatus());
      } else {
        ++i;
      }
    }
    if (!failure.ok()) {
      // The communicator is broken: what is still in flight is abandoned.
      while (!active.empty()) finish(0, BrokenStatus(active[0]->work->description()));
    }
    if (any_progress || active.empty()) {
      backoff.Reset();
    } else {
      backoff.Idle();
    }
  }
}

Status FabricCommunicator::RunBarrier(const std::string& description, uint32_t seq) {
  const int n = size();
  // Dissemination: in round k every rank signals rank + 2^k and hears from rank - 2^k; after
  // ceil(log2 n) rounds everyone has (transitively) heard from everyone.
  char token_out = 1, token_in = 0;
  auto transfer = NewTransfer(description);
  for (int round = 0, distance = 1; distance < n; ++round, distance *= 2) {
    const int to = (rank_ + distance) % n, from = (rank_ - distance + n) % n;
    transfer->Recv(from, &token_in, 1, Tag(OpKind::kBarrier, seq, from) | uint64_t(round), 0);
    transfer->Send(to, &token_out, 1, Tag(OpKind::kBarrier, seq, rank_) | uint64_t(round), 1);
    ZS_RETURN_IF_ERROR(transfer->WaitAll());
  }
  return OkStatus();
}

Status FabricCommunicator::RunSplit(uint32_t seq, int color, int key, const std::string& name,
                                    std::unique_ptr<Communicator>* child) {
  struct Entry {
    int32_t color;
    int32_t key;
    uint64_t free_ids;
  };
  std::vector<uint16_t> candidates;
  for (int i = 0; i < kCommIdCandidates; ++i) {
    const uint64_t h =
        SplitMix64(SplitMix64(SplitMix64(comm_id_) ^ seq) ^ uint64_t(uint32_t(color))) ^ i;
    candidates.push_back(uint16_t(1 + SplitMix64(h) % 4095));
  }
  Entry mine{color, key, color >= 0 ? endpoint_->ReserveCommIds(candidates) : 0};
  auto release_except = [&](int keep) {
    for (int i = 0; i < kCommIdCandidates; ++i) {
      if (i != keep && (mine.free_ids >> i & 1)) endpoint_->ReleaseCommId(candidates[i]);
    }
  };
  std::vector<Entry> all(size());
  Status exchanged =
      RunAllGather(fmt::format("split(color={}, key={}, '{}') on group '{}' (rank {} of {})", color,
                               key, name, group_name(), rank_, size()),
                   OpKind::kSplit, seq, &mine, all.data(), sizeof(Entry));
  if (!exchanged.ok()) {
    release_except(-1);
    return exchanged;
  }
  if (color < 0) return OkStatus();
  std::vector<int> members;
  uint64_t common = ~uint64_t{0};
  for (int p = 0; p < size(); ++p) {
    if (all[p].color != color) continue;
    members.push_back(p);
    common &= all[p].free_ids;
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[a].key != all[b].key ? all[a].key < all[b].key : a < b;
  });
  if (common == 0) {
    release_except(-1);
    return InternalError(
        fmt::format("split(color={}) of group '{}': no communicator id is free "
                    "on every member's endpoint (too many communicators)",
                    color, group_name()));
  }
  const int chosen = std::countr_zero(common);
  release_except(chosen);
  std::vector<int> world_ranks;
  std::vector<FabricPeer> peers;
  int new_rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == rank_) new_rank = int(i);
    world_ranks.push_back(world_ranks_[members[i]]);
    peers.push_back(peers_[members[i]]);
  }
  CommOptions options = options_;
  options.group_name = name;
  *child = std::make_unique<FabricCommunicator>(endpoint_, candidates[chosen], new_rank,
                                                std::move(world_ranks), std::move(peers),
                                                std::move(options), tuning_);
  return OkStatus();
}

// ---- Start... (user thread) -------------------------------------------------------------

CommHandle FabricCommunicator::StartAllGather(const void* send, void* recv, size_t count,
                                              DType dtype) {
  std::string description = DescribeOp(*this, "all_gather", count, dtype);
  const size_t bytes = count * DTypeSize(dtype);
  Status check = CheckAllGatherArgs(*this, send, recv, count, dtype, description);
  if (!check.ok()) return CommHandle::Completed(check, description);
  const uint32_t seq = next_seq_++;
  return queue_->Submit(description, [=, this] {
    return Guarded(description, [&] {
      return RunAllGather(description, OpKind::kAllGather, seq, send, recv, bytes);
    });
  });
}

CommHandle FabricCommunicator::StartReduceScatter(const void* send, void* recv, size_t count,
                                                  DType dtype, ReduceOp op) {
  std::string description = DescribeOp(*this, "reduce_scatter", count, dtype, op);
  const size_t bytes = count * DTypeSize(dtype);
  Status check = CheckReduceScatterArgs(*this, send, recv, count, dtype, description);
  if (!check.ok()) return CommHandle::Completed(check, description);
  const uint32_t seq = next_seq_++;
  Blocks blocks;
  for (int p = 0; p < size(); ++p) {
    blocks.offset.push_back(size_t(p) * bytes);
    blocks.bytes.push_back(bytes);
  }
  return queue_->Submit(description, [=, this] {
    return Guarded(description, [&] {
      return RunReduce(description, seq, send, recv, blocks, dtype, op, false);
    });
  });
}

CommHandle FabricCommunicator::StartAllReduce(const void* send, void* recv, size_t count,
                                              DType dtype, ReduceOp op) {
  std::string description = DescribeOp(*this, "all_reduce", count, dtype, op);
  const size_t esize = DTypeSize(dtype);
  Status check = CheckAllReduceArgs(*this, send, recv, count, dtype, description);
  if (!check.ok()) return CommHandle::Completed(check, description);
  const uint32_t seq = next_seq_++;
  const size_t per_block = (count + size() - 1) / size();
  Blocks blocks;
  for (int p = 0; p < size(); ++p) {
    const size_t begin = std::min(count, size_t(p) * per_block);
    const size_t end = std::min(count, begin + per_block);
    blocks.offset.push_back(begin * esize);
    blocks.bytes.push_back((end - begin) * esize);
  }
  return queue_->Submit(description, [=, this] {
    return Guarded(description, [&] {
      return RunReduce(description, seq, send, recv, blocks, dtype, op, true);
    });
  });
}

CommHandle FabricCommunicator::StartBroadcast(void* buffer, size_t count, DType dtype, int root) {
  std::string description =
      fmt::format("{} root {}", DescribeOp(*this, "broadcast", count, dtype), root);
  Status check = CheckBuffer(*this, "broadcast", buffer, count, "broadcast");
  if (check.ok()) check = CheckPeer(*this, root, "broadcast");
  if (!check.ok()) return CommHandle::Completed(check, description);
  const uint32_t seq = next_seq_++;
  const size_t bytes = count * DTypeSize(dtype);
  return queue_->Submit(description, [=, this] {
    return Guarded(description,
                   [&] { return RunBroadcast(description, seq, buffer, bytes, root); });
  });
}

CommHandle FabricCommunicator::StartSend(const void* buffer, size_t count, DType dtype, int peer) {
  std::string description =
      fmt::format("{} to rank {}", DescribeOp(*this, "send", count, dtype), peer);
  Status check = CheckBuffer(*this, "send", buffer, count, "send");
  if (check.ok()) check = CheckPeer(*this, peer, "send");
  if (check.ok() && peer == rank_) {
    check = InvalidArgumentError(
        fmt::format("send on group '{}' (rank {}): cannot send to itself", group_name(), rank_));
  }
  if (!check.ok()) return CommHandle::Completed(check, description);
  const uint32_t seq = send_seq_[peer]++;
  // Sends only read the buffer.
  return StartPointToPoint(std::move(description), true, const_cast<void*>(buffer),
                           count * DTypeSize(dtype), peer, seq);
}

CommHandle FabricCommunicator::StartRecv(void* buffer, size_t count, DType dtype, int peer) {
  std::string description =
      fmt::format("{} from rank {}", DescribeOp(*this, "recv", count, dtype), peer);
  Status check = CheckBuffer(*this, "recv", buffer, count, "recv");
  if (check.ok()) check = CheckPeer(*this, peer, "recv");
  if (check.ok() && peer == rank_) {
    check = InvalidArgumentError(fmt::format(
        "recv on group '{}' (rank {}): cannot receive from itself", group_name(), rank_));
  }
  if (!check.ok()) return CommHandle::Completed(check, description);
  const uint32_t seq = recv_seq_[peer]++;
  return StartPointToPoint(std::move(description), false, buffer, count * DTypeSize(dtype), peer,
                           seq);
}

CommHandle FabricCommunicator::StartAllToAllv(const void* send, std::span<const size_t> send_counts,
                                              std::span<const size_t> send_offsets, void* recv,
                                              std::span<const size_t> recv_counts,
                                              std::span<const size_t> recv_offsets, DType dtype) {
  auto layout =
      std::make_shared<AllToAllLayout>(send_counts, send_offsets, recv_counts, recv_offsets);
  std::string description = DescribeAllToAll(*this, *layout, dtype);
  Status check = CheckAllToAllArgs(*this, send, recv, *layout, dtype, description);
  if (!check.ok()) return CommHandle::Completed(check, description);
  const uint32_t seq = next_seq_++;
  return queue_->Submit(description, [=, this] {
    return Guarded(description,
                   [&] { return RunAllToAll(description, seq, send, recv, *layout, dtype); });
  });
}

CommHandle FabricCommunicator::StartBarrier() {
  std::string description =
      fmt::format("barrier on group '{}' (rank {} of {})", group_name(), rank_, size());
  const uint32_t seq = next_seq_++;
  return queue_->Submit(description, [=, this] {
    return Guarded(description, [&] { return RunBarrier(description, seq); });
  });
}

StatusOr<std::unique_ptr<Communicator>> FabricCommunicator::Split(int color, int key,
                                                                  std::string name) {
  const uint32_t seq = next_seq_++;
  std::unique_ptr<Communicator> child;
  const std::string description =
      fmt::format("split(color={}, key={}, '{}') on group '{}' (rank {} of {})", color, key, name,
                  group_name(), rank_, size());
  // Waited at once: a blocking call, so an idle queue builds the child on this thread, whose
  // CPU binding the child's worker inherits (blocking_call.h).
  BlockingCallScope blocking;
  CommHandle handle = queue_->Submit(description, [&, seq] {
    return Guarded(description, [&] { return RunSplit(seq, color, key, name, &child); });
  });
  ZS_RETURN_IF_ERROR(handle.Wait());
  return child;
}

}  // namespace zs
