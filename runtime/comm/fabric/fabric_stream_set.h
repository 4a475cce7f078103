// FabricStreamSet: the segmented messages ("streams") of one fabric operation between this rank
// and its peers, posted through a FabricTransfer within a window of segments per stream, with
// the clear-to-send handshake above the inject size. FabricCommunicator's operations are built
// from it.
//
// Contract: one operation's object, used by the one thread that runs the operation; it borrows
// the transfer and the streams' buffers, which must outlive it. Header-only (Step is a template).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/fabric/fabric_transfer.h"

namespace zs {

inline constexpr int kFabricMaxSegments = (1 << 20) - 1;  // the tag's segment field

// The tags of one stream, without the segment field: its data, and the clear-to-send messages
// that its receiver returns (see [Note: rendezvous above the inject size]).
struct FabricStreamTags {
  uint64_t data = 0;
  uint64_t clear_to_send = 0;
};

// One segmented message between this rank and one peer. Segment s lives at
// base + (ring ? s % ring : s) * segment and has min(segment, bytes - s * segment) bytes.
//
// [Note: rendezvous above the inject size] A segment of more than `rendezvous_bytes` is sent
// only after its receive is posted: the receiver posts the receive, then sends an empty
// clear-to-send message (tag `cts_tag` | segment); the sender posts the data when that arrives.
// Providers may hold a send above their inject size until the receiver matches it, and nothing
// in libfabric promises that such a send leaves the endpoint's other sends alone: the shm
// provider (1.17) completes its large (CMA) sends through one in-order response queue per
// endpoint, so one unmatched large send withholds the completion of every later large send of
// the endpoint, to any peer and of any communicator sharing it (libfabric issue #9853). A
// segment at or below the inject size is copied by the provider when posted (shm writes it
// into the receiver's queue and completes it at once) and needs no handshake, so small
// messages cost no extra round trip. Every rank agrees on `rendezvous_bytes` at connect.
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
};

// The streams of one operation, posted through a FabricTransfer within a per-stream window.
class FabricStreamSet {
 public:
  FabricStreamSet(FabricTransfer& transfer, size_t segment, int window, size_t rendezvous_bytes)
      : transfer_(transfer),
        segment_(segment),
        window_(window),
        rendezvous_bytes_(rendezvous_bytes) {}

  int Add(bool is_send, int peer, const void* base, size_t bytes, FabricStreamTags tags,
          int ring = 0) {
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

  void PumpAll() {
    for (size_t i = 0; i < streams_.size(); ++i) {
      FabricStream& s = streams_[i];
      while (s.next < std::min(s.limit, s.segments) && s.in_flight < window_) {
        const int seg = s.next++;
        ++s.in_flight;
        const size_t length = SegmentLength(s, seg);
        const uint64_t data_tag = s.tag | uint64_t(seg);
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
        // See [Note: rendezvous above the inject size]. A sender waits for the clear-to-send
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
    Finish(on_segment);
    return OkStatus();
  }
  // Step without blocking: one poll of the transfer.
  Status Poll(bool* progressed) {
    finished_.clear();
    ZS_RETURN_IF_ERROR(transfer_.Poll(&finished_, progressed));
    Finish([](int, int) {});
    return OkStatus();
  }

 private:
  // What a cookie of a request stands for: bits 0-31 the segment, 32-61 the stream,
  // 62-63 the part (the data, or the segment's clear-to-send message).
  enum class Part : uint64_t { kData = 0, kClearToSend = 1 };
  static uint64_t Cookie(int stream, int seg, Part part) {
    return (uint64_t(part) << 62) | (uint64_t(stream) << 32) | uint32_t(seg);
  }

  template <typename F>
  void Finish(F&& on_segment) {
    for (uint64_t cookie : finished_) {
      const int index = int((cookie >> 32) & 0x3fffffff), seg = int(uint32_t(cookie));
      FabricStream& s = streams_[index];
      if (Part(cookie >> 62) == Part::kClearToSend) {
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
    PumpAll();
  }

  FabricTransfer& transfer_;
  const size_t segment_;
  const int window_;
  const size_t rendezvous_bytes_;
  std::vector<FabricStream> streams_;
  std::vector<uint64_t> finished_;
};

}  // namespace zs
