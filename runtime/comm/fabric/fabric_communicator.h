// FabricCommunicator: a Communicator over a libfabric RDM endpoint with tagged messages, for
// ranks that are processes on one or many hosts (or threads of one process, each with its own
// endpoint). Created by the fabric backend (fabric_backend.h) or by Split.
//
// Contract (beyond communicator.h)
// - Operations run in order, one at a time, on the communicator's OpQueue: on its worker thread,
//   or on the caller for a blocking form when the queue is idle (op_queue.h). The thread that
//   runs an operation drives the endpoint's manual progress while it waits (FabricTransfer). No
//   thread polls while idle.
// - Tags: comm id (12 bits) | op kind (4) | op sequence number (16) | sender's group rank (12)
//   | segment (20). The op kind and sequence number keep a mismatched call from ever matching
//   another operation's messages: it fails with DeadlineExceeded (or InvalidArgument when only
//   the count differs) naming the operation, never corrupts the other operation's buffers.
// - Large messages stream in segments (ZS_FABRIC_SEGMENT_BYTES, default 1 MiB; at most
//   ZS_FABRIC_WINDOW, default 4, in flight per peer and direction; both must be equal on every
//   rank). Receives go straight into the caller's output except the reduction inputs, which
//   land in a per-communicator ring of (size-1) x window segments (host tier, kCommBuffers).
// - Direct copy (FabricTuning::direct_copy, the default for ranks on one host over shm): a
//   segment above the eager size is not a libfabric message at all; the sender sends a small
//   descriptor of it and the receiver copies it out of the sender's memory (process_vm_readv),
//   then returns a done word ([Note: direct copy] in fabric_stream_set.h). The rest of this
//   contract holds unchanged; where it speaks of a segment's clear-to-send, read the descriptor
//   and the done word. Without direct copy (tcp, several hosts, or refused at connect):
// - No send above the eager size is ever posted before its receive (rendezvous): for every
//   segment of more than FabricTuning::rendezvous_bytes (the smallest eager size of the ranks'
//   endpoints, agreed at connect: 4 KiB for shm, rxm's eager limit for tcp;ofi_rxm, 16 KiB by
//   default; see FabricEndpoint::eager_size and [Note: eager sizes]) the receiver posts its
//   receive and then sends an empty clear-to-send message, and the sender posts the data only
//   when that arrives. Why: a provider may hold a large send until the receiver matches it, and
//   may let that send hold up others; shm does (libfabric #9853: its large sends complete in
//   order through one queue per endpoint, so an unmatched one stalls every later large send of
//   the endpoint, to any peer, of every communicator sharing it). With the handshake a send that
//   waits for a late receive is only a posted receive of an empty message, and sends to peers
//   that are ready, collectives and other communicators proceed. Segments at or below the
//   eager size are sent at once (their sends complete without a matching receive: the
//   receiver's provider buffers them until one is posted), so small messages pay no round
//   trip; larger ones pay one per segment, overlapped by the window. The clear-to-send tags use
//   kinds of their own, never matching data.
// - A count that differs between the two ranks of a send/recv or a collective pair fails with
//   InvalidArgument on the receiving rank (and usually the sending one) when the data arrives,
//   or with DeadlineExceeded on both when only the sender's segment needs a clear-to-send.
// - Reduce-scatter is a direct exchange: the owner of each block reduces the size()
//   contributions in rank order with ReduceSources, segment by segment. All-reduce is that
//   reduce-scatter over blocks of ceil(count/size) elements fused with the all-gather of each
//   reduced segment, so both phases stream together. Broadcast is a pipelined chain from the
//   root. Barrier is a dissemination barrier.
// - All-to-all runs in two phases: every pair of ranks first exchanges its two counts (16 bytes
//   each way: what I send you, what I expect from you), so that a count that disagrees fails on
//   both ranks of the pair with InvalidArgument naming both counts, before any data moves (no
//   truncation, no wait for data that never comes); then every pair with agreeing counts
//   streams its blocks directly between the caller's buffers (segments as above), the own
//   block is a memcpy. The other ranks finish normally.
// - Send/Recv match in start order per pair (a per-pair sequence number in the tag). They do
//   not wait in the queue behind each other or behind collectives: a thread of their own, started
//   by the first one and asleep while none is in flight, posts and progresses them at once, so
//   ranks that start all their sends before their receives (a ring) cannot deadlock, and a send
//   whose receive is started late (after other operations, of this or other communicators)
//   holds up nothing else (rendezvous, above). Their buffers are untouched by collectives anyway
//   (communicator.h), so only matching order counts. A failed operation of either kind breaks
//   the communicator for both.
// - Split: children share the parent's endpoint. The child's comm id is chosen from 64
//   candidates derived from (parent id, split sequence number, color); each member reserves the
//   candidates free on its endpoint, the members AND their masks and take the first common one,
//   so the id is identical on every member and unique on each member's endpoint.
// - Destroying the communicator drains its queue (operations still queued run first).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/fabric/fabric_endpoint.h"
#include "runtime/comm/fabric/fabric_peer.h"
#include "runtime/comm/op_checks.h"
#include "runtime/comm/op_queue.h"

namespace zs {

class FabricTransfer;
class FabricStreamSet;
struct FabricStreamTags;

struct FabricTuning {
  size_t segment_bytes = size_t{1} << 20;  // multiple of 64
  int window = 4;                          // segments in flight per peer and direction
  // Segments of more bytes wait for the receiver's clear-to-send (see the contract). The
  // backend sets the smallest eager size of the ranks' endpoints (FabricEndpoint::eager_size,
  // lowered by ZS_FABRIC_EAGER_BYTES); 0 = every nonempty segment. Equal on every rank.
  size_t rendezvous_bytes = 0;
  // Segments above rendezvous_bytes are copied by the receiver straight out of the sender's
  // memory ([Note: direct copy] in fabric_stream_set.h). The backend sets it when every rank is
  // on one host, the provider is shm and every rank could read every other's memory at connect
  // (ZS_FABRIC_DIRECT_COPY=0 turns it off); every rank of a group must agree.
  bool direct_copy = false;
  // Under direct copy, the segment of streams that land straight in the caller's buffers
  // (all-gather, send/recv, all-to-all): a larger copy per descriptor costs fewer messages and
  // system calls. Reductions (their scratch ring) and broadcast (its chain's pipeline) keep
  // segment_bytes. Multiple of 64; equal on every rank.
  size_t direct_segment_bytes = size_t{4} << 20;
  // Under direct copy, segments in flight per stream (at least `window`): a segment in flight
  // holds no buffer there, only a descriptor ([Note: the direct-copy window] in
  // fabric_stream_set.h). Equal on every rank.
  int direct_window = 16;
};

class FabricCommunicator final : public Communicator {
 public:
  // `world_ranks[i]` is the endpoint (world) rank of group rank i; `peers` is by group rank.
  FabricCommunicator(std::shared_ptr<FabricEndpoint> endpoint, uint16_t comm_id, int rank,
                     std::vector<int> world_ranks, std::vector<FabricPeer> peers,
                     CommOptions options, FabricTuning tuning);
  ~FabricCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return int(world_ranks_.size()); }
  std::string_view backend_name() const override { return "fabric"; }
  const CommOptions& options() const override { return options_; }
  const std::string& provider_name() const { return endpoint_->provider_name(); }
  // Whether segments above the eager size are copied directly (FabricTuning::direct_copy).
  bool direct_copy() const { return tuning_.direct_copy; }
  // Segments of more bytes wait for a clear-to-send (FabricTuning::rendezvous_bytes).
  size_t rendezvous_bytes() const { return tuning_.rendezvous_bytes; }

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
  enum class OpKind : uint8_t {
    kAllGather = 1,
    kReduceScatter,
    kAllReduceReduce,
    kAllReduceGather,
    kBroadcast,
    kPointToPoint,
    kBarrier,
    kSplit,
    kAllToAllCounts,
    kAllToAll,
    kClearToSend,              // for the kinds that share next_seq_ (all but the two below)
    kClearToSendGather,        // for kAllReduceGather (an all-reduce also streams kAllReduceReduce)
    kClearToSendPointToPoint,  // for kPointToPoint (per-pair sequence numbers)
  };
  struct Blocks;

  uint64_t Tag(OpKind kind, uint32_t seq, int src) const;
  // A stream's data tag (src = sender) and clear-to-send tag (src = receiver).
  FabricStreamTags Tags(OpKind kind, uint32_t seq, int sender, int receiver) const;
  // The segment size of an operation whose largest message has `largest_message` bytes;
  // `direct` selects FabricTuning::direct_segment_bytes when direct copy is on.
  size_t SegmentBytes(size_t largest_message, bool direct = false) const;
  std::unique_ptr<FabricTransfer> NewTransfer(const std::string& description) const;
  // The streams of one operation over `transfer`, with the communicator's window, rendezvous
  // threshold and direct copy.
  FabricStreamSet NewStreams(FabricTransfer& transfer, size_t segment) const;
  char* Scratch(size_t bytes);  // the reduction ring; the running operation's thread only

  Status RunAllGather(const std::string& description, OpKind kind, uint32_t seq,
                      const void* send, void* recv, size_t bytes);
  Status RunReduce(const std::string& description, uint32_t seq, const void* send, void* recv,
                   const Blocks& blocks, DType dtype, ReduceOp op, bool all_gather);
  Status RunBroadcast(const std::string& description, uint32_t seq, void* buffer, size_t bytes,
                      int root);
  Status RunAllToAll(const std::string& description, uint32_t seq, const void* send, void* recv,
                     const AllToAllLayout& layout, DType dtype);
  // Point-to-point operations bypass the queue (see the contract above).
  struct PointToPointOp;
  CommHandle StartPointToPoint(std::string description, bool is_send, void* buffer, size_t bytes,
                               int peer, uint32_t seq);
  void PointToPointLoop();
  // Every operation, queued or not, fails with kAborted after the first failure.
  Status BrokenStatus(const std::string& description) const;
  void MarkBroken(const Status& status);
  Status Guarded(const std::string& description, const std::function<Status()>& run);
  Status RunBarrier(const std::string& description, uint32_t seq);
  Status RunSplit(uint32_t seq, int color, int key, const std::string& name,
                  std::unique_ptr<Communicator>* child);

  const std::shared_ptr<FabricEndpoint> endpoint_;
  const uint16_t comm_id_;
  const int rank_;
  const std::vector<int> world_ranks_;
  const std::vector<FabricPeer> peers_;       // by group rank
  std::vector<fi_addr_t> addresses_;          // by group rank; set in the constructor
  std::vector<pid_t> pull_pids_;              // by group rank; empty without direct copy
  const std::unique_ptr<PeerLiveness> liveness_;  // over peers_, for every transfer
  const CommOptions options_;
  const FabricTuning tuning_;

  // Touched by the user thread in Start...() only (one thread at a time, see communicator.h).
  uint32_t next_seq_ = 0;
  std::vector<uint32_t> send_seq_;  // per peer
  std::vector<uint32_t> recv_seq_;  // per peer

  // The running operation's thread only (OpQueue runs one at a time). Shared so that requests the provider would not cancel keep it alive.
  std::shared_ptr<char[]> scratch_;
  size_t scratch_bytes_ = 0;

  mutable std::mutex broken_mu_;
  Status broken_;  // the first failure of any operation; guarded by broken_mu_

  // The point-to-point thread: started by the first Send/Recv, sleeps while none is in flight.
  std::mutex p2p_mu_;
  std::condition_variable p2p_cv_;
  std::deque<std::unique_ptr<PointToPointOp>> p2p_pending_;  // guarded by p2p_mu_
  bool p2p_stopping_ = false;                                 // guarded by p2p_mu_
  std::thread p2p_thread_;

  // Reset first thing in the destructor: the queued operations must finish before the p2p
  // thread stops, the scratch accounting is settled and the comm id is released.
  std::optional<OpQueue> queue_;
};

}  // namespace zs
