// FabricStreamSet: the segmented messages ("streams") of one fabric operation between this rank
// and its peers, posted through a FabricTransfer within a window of segments per stream, with
// the clear-to-send handshake above the eager size. FabricCommunicator's operations are built
// from it.
//
// Contract: one operation's object, used by the one thread that runs the operation; it borrows
// the transfer and the streams' buffers, which must outlive it. Header-only (Step is a template).
// With direct copy (`pull_pids` not empty; see [Note: direct copy]) the receiving thread copies
// each segment out of the sender's memory itself, inside Step/Poll.
#pragma once

#include <fmt/format.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "runtime/base/check.h"
#include "runtime/base/status.h"
#include "runtime/comm/fabric/fabric_peer.h"
#include "runtime/comm/fabric/fabric_transfer.h"

namespace zs {

inline constexpr int kFabricMaxSegments = (1 << 20) - 1;  // the tag's segment field

// The tags of one stream, without the segment field: its data, and the clear-to-send messages
// that its receiver returns (see [Note: rendezvous above the eager size]).
struct FabricStreamTags {
  uint64_t data = 0;
  uint64_t clear_to_send = 0;
};

// One segmented message between this rank and one peer. Segment s lives at
// base + (ring ? s % ring : s) * segment and has min(segment, bytes - s * segment) bytes.
//
// [Note: rendezvous above the eager size] A segment of more than `rendezvous_bytes` is sent
// only after its receive is posted: the receiver posts the receive, then sends an empty
// clear-to-send message (tag `cts_tag` | segment); the sender posts the data when that arrives.
// Providers may hold a send above their eager size until the receiver matches it, and nothing
// in libfabric promises that such a send leaves the endpoint's other sends alone: the shm
// provider (1.17) completes its large (CMA) sends through one in-order response queue per
// endpoint, so one unmatched large send withholds the completion of every later large send of
// the endpoint, to any peer and of any communicator sharing it (libfabric issue #9853). A
// segment at or below the eager size completes without its receive (shm copies it into the
// receiver's queue when posted; rxm writes it to the socket and the receiver's rxm buffers it
// until matched: [Note: eager sizes] in fabric_endpoint.cc) and needs no handshake, so small
// messages cost no extra round trip. Every rank agrees on `rendezvous_bytes` at connect.
//
// [Note: direct copy] When every rank of the group runs on this host and can read the others'
// memory with process_vm_readv (probed at connect, FabricTuning::direct_copy), a segment above
// `rendezvous_bytes` moves without a large libfabric message: the sender sends a descriptor
// (address, length, the stream's total bytes; 24 bytes, eager in every provider) with the
// segment's data tag, and the receiver, once its window and gating allow, copies the segment
// straight from the sender's buffer into its own (one copy, by the receiving thread, with no
// provider lock held) and returns a "done" word on the clear-to-send tag, which completes the
// segment on the sender. Why: the shm provider (1.17) performs its own CMA copy of a large
// message inside the receiver's progress while holding the receiver's region spin lock, the
// lock every sender to that rank needs to post anything; so on few cores the two directions of
// an exchange serialize (a rank spins in fi_tsend while its peer copies), and a rank's copies
// and its peer's never overlap. The done word is 0; or the receiver's byte count of the stream
// + 1 when the descriptor's differs (a mismatched call: both sides fail with InvalidArgument);
// or ~0 when the copy failed (both sides fail with Unavailable). The sender's buffer is only
// read, and only until the done word arrives, so a sender's operation completes when every
// receiver is through with its buffer, as with a provider's own rendezvous. Only small
// messages then cross libfabric, so libfabric #9853 (above) cannot occur either.
struct FabricStream {
  bool is_send = false;
  int peer = 0;
  char* base = nullptr;
  size_t bytes = 0;
  int ring = 0;          // 0: the segments are laid out linearly
  uint64_t tag = 0;      // without the segment field
  uint64_t cts_tag = 0;  // the clear-to-send tag, without the segment field
  int segments = 0;
  int limit = 0;      // segments [0, limit) may be posted (gating by the operation)
  int next = 0;       // next segment to post
  int in_flight = 0;  // sends: awaiting clear-to-send or posted; receives: posted
  int done = 0;
  int cts_pending = 0;  // receives: clear-to-send messages posted and not yet completed
                        // direct copy: small sends (descriptors, done words) not yet completed
};

// What crosses libfabric for one segment under direct copy (see [Note: direct copy]).
struct FabricPullDescriptor {
  uint64_t address = 0;       // of the segment in the sender's address space
  uint64_t length = 0;        // of the segment
  uint64_t stream_bytes = 0;  // the sender's byte count of the whole stream
};

// The streams of one operation, posted through a FabricTransfer within a per-stream window.
class FabricStreamSet {
 public:
  // `pull_pids`: empty, or the process id of every group rank, to copy directly (see
  // [Note: direct copy]); every rank of the group must agree on whether it is empty.
  // `direct_window` (0: `window`): the window of streams whose segments are copied directly
  // ([Note: the direct-copy window]).
  FabricStreamSet(FabricTransfer& transfer, size_t segment, int window, size_t rendezvous_bytes,
                  std::span<const pid_t> pull_pids = {}, int direct_window = 0)
      : transfer_(transfer),
        segment_(segment),
        window_(window),
        direct_window_(pull_pids.empty() || segment <= rendezvous_bytes
                           ? window
                           : std::max(window, direct_window)),
        rendezvous_bytes_(rendezvous_bytes),
        pull_pids_(pull_pids) {
    if (!pull_pids_.empty()) transfer_.KeepAliveIfOrphaned(slots_);
  }

  int Add(bool is_send, int peer, const void* base, size_t bytes, FabricStreamTags tags,
          int ring = 0) {
    ZS_CHECK(streams_.size() < (size_t{1} << 16), "more than 65535 streams in one operation");
    FabricStream s;
    s.is_send = is_send;
    s.peer = peer;
    s.base = static_cast<char*>(const_cast<void*>(base));
    s.bytes = bytes;
    s.ring = ring;
    s.tag = tags.data;
    s.cts_tag = tags.clear_to_send;
    s.segments = int((bytes + segment_ - 1) / segment_);
    s.limit = s.segments;
    streams_.push_back(s);
    return int(streams_.size()) - 1;
  }
  FabricStream& operator[](int i) { return streams_[i]; }
  int size() const { return int(streams_.size()); }
  size_t SegmentLength(const FabricStream& s, int seg) const {
    return std::min(segment_, s.bytes - size_t(seg) * segment_);
  }

  char* Where(const FabricStream& s, int seg) const {
    return s.base + size_t(s.ring ? seg % s.ring : seg) * segment_;
  }

  // [Note: the direct-copy window] A segment copied directly holds no buffer while it is in
  // flight: the sender has sent a 24-byte descriptor and waits for the done word, the data
  // stays where it is until the receiver copies it. So the window does not bound memory there,
  // only how far ahead of the receiver the sender may describe its data; the receiving side of
  // a reduction's ring is still bounded by its `limit` (the ring's free slots). With the common
  // window (4) the two ranks of an all-gather met every 4 segments: each describes its next
  // segments only after its own copy in progress returns and it reads the peer's done words,
  // and whichever rank was late held the other up (2 ranks as processes, 64 MiB blocks in
  // 4 MiB segments: 21% slower than with 16 in flight; docs/PERFORMANCE.md, "The direct-copy
  // window").
  int WindowOf(const FabricStream& s) const {
    return s.segments > 0 && SegmentLength(s, 0) > rendezvous_bytes_ ? direct_window_ : window_;
  }

  void PumpAll() {
    for (size_t i = 0; i < streams_.size(); ++i) {
      FabricStream& s = streams_[i];
      const int window = WindowOf(s);
      while (s.next < std::min(s.limit, s.segments) && s.in_flight < window) {
        const int seg = s.next++;
        ++s.in_flight;
        const size_t length = SegmentLength(s, seg);
        const uint64_t data_tag = s.tag | uint64_t(seg);
        if (length > rendezvous_bytes_ && !pull_pids_.empty()) {
          PostPull(int(i), s, seg, length);
          continue;
        }
        if (length <= rendezvous_bytes_) {
          if (s.is_send) {
            transfer_.Send(s.peer, Where(s, seg), length, data_tag,
                           Cookie(int(i), seg, Part::kData));
          } else {
            transfer_.Recv(s.peer, Where(s, seg), length, data_tag,
                           Cookie(int(i), seg, Part::kData));
          }
          continue;
        }
        // See [Note: rendezvous above the eager size]. A sender waits for the clear-to-send
        // (Finish posts the data); a receiver posts its receive first, then clears the send.
        const uint64_t cts_tag = s.cts_tag | uint64_t(seg);
        const uint64_t cts_cookie = Cookie(int(i), seg, Part::kClearToSend);
        if (s.is_send) {
          transfer_.Recv(s.peer, nullptr, 0, cts_tag, cts_cookie);
        } else {
          transfer_.Recv(s.peer, Where(s, seg), length, data_tag, Cookie(int(i), seg, Part::kData));
          transfer_.Send(s.peer, nullptr, 0, cts_tag, cts_cookie);
          ++s.cts_pending;
        }
      }
    }
  }
  bool AllDone() const {
    for (const FabricStream& s : streams_) {
      if (s.done < s.segments || s.cts_pending > 0) return false;
    }
    return true;
  }
  // Waits for finished segments, pumps more and calls on_segment(stream index, segment) for
  // each finished one.
  template <typename F>
  Status Step(F&& on_segment) {
    finished_.clear();
    ZS_RETURN_IF_ERROR(transfer_.WaitSome(&finished_));
    if (finished_.empty()) {
      return InternalError(
          fmt::format("{}: no transfer outstanding but the operation is not "
                      "complete",
                      transfer_.description()));
    }
    return Finish(on_segment);
  }
  // Step without blocking: one poll of the transfer.
  Status Poll(bool* progressed) {
    finished_.clear();
    ZS_RETURN_IF_ERROR(transfer_.Poll(&finished_, progressed));
    return Finish([](int, int) {});
  }

 private:
  // What a cookie of a request stands for: bits 0-19 the segment (< kFabricMaxSegments),
  // 20-35 the stream, 36-61 the direct-copy slot, 62-63 the part (the data, or the segment's
  // clear-to-send message; under direct copy: the descriptor, or the done word).
  enum class Part : uint64_t { kData = 0, kClearToSend = 1, kDescriptor = 2, kDone = 3 };
  static uint64_t Cookie(int stream, int seg, Part part, int slot = 0) {
    return (uint64_t(part) << 62) | (uint64_t(slot) << 36) | (uint64_t(stream) << 20) |
           uint64_t(seg);
  }

  // The buffers of one direct-copy message in flight: a descriptor (a sender's outgoing or a
  // receiver's incoming one) and a done word. Held by the posted requests (refs), reused after.
  static constexpr uint64_t kPullFailed = ~uint64_t{0};  // a done word: the copy failed
  struct Slot {
    FabricPullDescriptor descriptor;
    uint64_t done = 0;
    int refs = 0;
  };
  int AcquireSlot() {
    int k;
    if (!free_slots_.empty()) {
      k = free_slots_.back();
      free_slots_.pop_back();
    } else {
      k = int(slots_->size());
      slots_->emplace_back();  // a deque: the other slots stay where they are
    }
    (*slots_)[k] = Slot{};
    return k;
  }
  void ReleaseSlot(int k) {
    if (--(*slots_)[k].refs == 0) free_slots_.push_back(k);
  }

  // Posts segment `seg` of stream `i` under direct copy: a sender posts the receive of the done
  // word and sends its descriptor; a receiver posts the receive of the descriptor.
  void PostPull(int i, FabricStream& s, int seg, size_t length) {
    const int k = AcquireSlot();
    Slot& slot = (*slots_)[k];
    if (s.is_send) {
      slot.descriptor = FabricPullDescriptor{reinterpret_cast<uint64_t>(Where(s, seg)), length,
                                             s.bytes};
      slot.refs = 2;
      ++s.cts_pending;
      transfer_.Recv(s.peer, &slot.done, sizeof(slot.done), s.cts_tag | uint64_t(seg),
                     Cookie(i, seg, Part::kDone, k));
      transfer_.Send(s.peer, &slot.descriptor, sizeof(slot.descriptor), s.tag | uint64_t(seg),
                     Cookie(i, seg, Part::kDescriptor, k));
    } else {
      slot.refs = 1;
      transfer_.Recv(s.peer, &slot.descriptor, sizeof(slot.descriptor), s.tag | uint64_t(seg),
                     Cookie(i, seg, Part::kDescriptor, k));
    }
  }

  // A direct-copy request finished. Returns whether segment `seg` of `s` is now complete.
  StatusOr<bool> FinishPull(int index, FabricStream& s, int seg, Part part, int k) {
    Slot& slot = (*slots_)[k];
    if (s.is_send) {
      if (part == Part::kDescriptor) {  // the descriptor went out
        --s.cts_pending;
        ReleaseSlot(k);
        return false;
      }
      const uint64_t done = slot.done;  // the receiver copied the segment
      ReleaseSlot(k);
      if (done == kPullFailed) {
        return UnavailableError(fmt::format("{}: rank {} could not copy this rank's data (tag "
                                            "{:#x}); its own error names the cause",
                                            transfer_.description(), s.peer, s.tag));
      }
      if (done != 0) {
        return InvalidArgumentError(fmt::format(
            "{}: rank {} expected {} bytes where this rank sent {} (tag {:#x}): the ranks called "
            "the operation with different counts",
            transfer_.description(), s.peer, done - 1, s.bytes, s.tag));
      }
      return true;
    }
    if (part == Part::kDone) {  // our done word went out
      --s.cts_pending;
      ReleaseSlot(k);
      return false;
    }
    const FabricPullDescriptor d = slot.descriptor;
    const size_t length = SegmentLength(s, seg);
    Status status;
    if (d.stream_bytes != s.bytes || d.length != length) {
      status = InvalidArgumentError(fmt::format(
          "{}: rank {} sent {} bytes where this rank expected {} (tag {:#x}): the ranks called "
          "the operation with different counts",
          transfer_.description(), s.peer, d.stream_bytes, s.bytes, s.tag));
      slot.done = uint64_t(s.bytes) + 1;
    } else {
      status = ReadPeerMemory(pull_pids_[s.peer], Where(s, seg), d.address, length);
      if (!status.ok()) {
        status = UnavailableError(fmt::format("{}: copying {} bytes from rank {}: {}",
                                              transfer_.description(), length, s.peer,
                                              status.message()));
      }
      slot.done = status.ok() ? 0 : kPullFailed;
    }
    // The same slot carries the done word back (refs stays 1: the send now holds it).
    ++s.cts_pending;
    transfer_.Send(s.peer, &slot.done, sizeof(slot.done), s.cts_tag | uint64_t(seg),
                   Cookie(index, seg, Part::kDone, k));
    if (!status.ok()) return status;
    return true;
  }

  template <typename F>
  Status Finish(F&& on_segment) {
    Status first_error;
    for (uint64_t cookie : finished_) {
      const int seg = int(cookie & 0xfffff), index = int((cookie >> 20) & 0xffff);
      const int k = int((cookie >> 36) & 0x3ffffff);
      FabricStream& s = streams_[index];
      const Part part = Part(cookie >> 62);
      if (part == Part::kDescriptor || part == Part::kDone) {
        StatusOr<bool> complete = FinishPull(index, s, seg, part, k);
        if (!complete.ok()) {
          if (first_error.ok()) first_error = complete.status();
          continue;
        }
        if (*complete) {
          --s.in_flight;
          ++s.done;
          on_segment(index, seg);
        }
        continue;
      }
      if (part == Part::kClearToSend) {
        if (s.is_send) {  // the receive is posted: send the data now
          transfer_.Send(s.peer, Where(s, seg), SegmentLength(s, seg), s.tag | uint64_t(seg),
                         Cookie(index, seg, Part::kData));
        } else {
          --s.cts_pending;
        }
        continue;
      }
      --s.in_flight;
      ++s.done;
      on_segment(index, seg);
    }
    if (!first_error.ok()) return first_error;
    PumpAll();
    return OkStatus();
  }

  FabricTransfer& transfer_;
  const size_t segment_;
  const int window_;
  const int direct_window_;  // window_ without direct copy
  const size_t rendezvous_bytes_;
  const std::span<const pid_t> pull_pids_;
  std::vector<FabricStream> streams_;
  std::vector<uint64_t> finished_;
  // Direct copy: shared with the transfer, which keeps it alive for requests it orphans.
  std::shared_ptr<std::deque<Slot>> slots_ = std::make_shared<std::deque<Slot>>();
  std::vector<int> free_slots_;
};

}  // namespace zs
