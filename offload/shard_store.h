// ShardStore: where a rank's offloadable shard arrays live (device memory, host memory or an NVMe
// file) and the one place that moves them: the engine's step reads "acquire, step, release",
// whatever the tier.
//
// Contract
// - Built from one SlotShape per slot: a slot is what is stepped at once (a sub-group of a unit's
//   optimizer range) and holds a few arrays (fp32 master, optimizer states, int8 scales) of
//   given byte sizes. The store does not know what the arrays mean.
// - Tiers (ShardStoreOptions::tier):
//     kDevice, kHost, kPinnedHost  every slot's arrays are allocated at Create in that tier (one
//                                  allocation per slot; host memory pinned as `pin` says) and
//                                  are always kResident; Acquire and Release do no I/O.
//     kNvme                        every slot has a region in one NvmeStore file; buffer_count
//                                  staging buffers (a PinnedBufferPool, pinned as `pin` says)
//                                  hold the slots that are in memory. MemoryTier::kNvme counts
//                                  the file's bytes in the device's tracker.
// - Slot states (NVMe; memory tiers are always kResident), one checked transition point (Move):
//     kOffloaded    only the file holds the slot (or nothing: never written); no buffer.
//     kFetching     a buffer is assigned and a read into it is in flight.
//     kResident     the buffer holds the slot's current bytes, the same as the file's unless the
//                   slot is acquired (a released dirty slot starts writing at once).
//     kWritingBack  the buffer holds the slot's bytes and a write of them is in flight.
//   kOffloaded -> kFetching (prefetch or demand read) -> kResident (read waited for);
//   kResident -> kWritingBack (Release dirty) -> kResident (write waited for, buffer kept);
//   kResident (not acquired) -> kOffloaded (its buffer taken for another slot).
//   A slot is acquired at most once at a time (ZS_CHECK).
// - Acquire(s, access) blocks the host until s is kResident and returns its arrays. kRead waits
//   for its read; kOverwrite gives a buffer without reading (the caller writes every array,
//   e.g. initial values). Then, with pipeline_read, it starts reads of the slots the trace
//   predicts next, into free buffers, while buffers are free or hold clean slots that are not
//   acquired (it may wait for write-backs other than the newest one, which started earlier).
// - [Note: store trace] The order of Acquire calls is recorded in the first pass and replayed
//   (runtime/gather/execution_trace.h); EndPass() ends a pass. A pass that acquires in another
//   order invalidates the trace safely: prefetched slots stay valid copies of the file, so a
//   wrong prediction costs a read, never correctness.
// - Release(s, dirty): dirty starts a write of the slot (pipeline_write) or writes it and waits
//   (not pipelined); clean keeps the buffer as a cache. Flush() waits for every write.
// - Integrity: NvmeStore checks every page it reads (nvme_store.h); an I/O error is returned by
//   the call that waits for it, naming the slot and the file. After an error the store is
//   broken: Acquire returns kAborted naming the first error. The destructor waits for every
//   request (ignoring errors) and the NvmeStore removes its file.
// - Buffers: a slot needs one staging buffer while acquired. buffer_count >= 2 (one being
//   stepped, one writing back); more buffers let reads run ahead. If every buffer is acquired
//   or fetching when a demand read needs one, Acquire fails with kFailedPrecondition naming
//   buffer_count.
// - Threads: one thread (the rank's compute thread) calls every method; I/O runs on the
//   NvmeStore's threads. stats() may be read by that thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "offload/nvme_store.h"
#include "offload/pinned_buffer_pool.h"
#include "runtime/base/status.h"
#include "runtime/device/device.h"
#include "runtime/gather/execution_trace.h"

namespace zs {

enum class SlotResidency : uint8_t { kOffloaded = 0, kFetching, kResident, kWritingBack };
std::string_view SlotResidencyName(SlotResidency r);  // "offloaded", "fetching", ...

struct SlotShape {
  std::string name;                  // in errors: "unit 'h.3' [0, 65536)"
  std::vector<int64_t> array_bytes;  // each array's bytes (0: the array is absent)
};

struct ShardStoreOptions {
  MemoryTier tier = MemoryTier::kDevice;
  MemoryCategory category = MemoryCategory::kOptimizerStates;
  std::string what = "optimizer states";  // in errors and logs
  // kNvme only:
  NvmeStoreOptions nvme;     // dir = nvme_path, name = "<what>.rank<r>", aio settings
  int64_t buffer_count = 4;  // staging buffers (>= 2)
  // Host memory (kHost arrays, NVMe staging buffers) page-locked or not (pinned_buffer_pool.h);
  // tier kPinnedHost means kHost with PinMode::kPinned.
  PinMode pin = PinMode::kPageable;
  bool pipeline_read = true;
  bool pipeline_write = true;
  // Not owned; null: no trace. The NVMe requests (nvme_store.h) and the host's waits for them
  // (track "offload wait") become spans.
  TraceRecorder* trace = nullptr;
};

struct SlotView {
  std::vector<char*> arrays;  // one per SlotShape::array_bytes entry (nullptr where 0 bytes)
};

struct ShardStoreStats {
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  int64_t demand_reads = 0;         // reads started by Acquire itself
  int64_t prefetch_hits = 0;        // acquires of slots a prefetch had started
  int64_t cache_hits = 0;           // acquires of slots still in a buffer (no read)
  double read_wait_seconds = 0.0;   // host time blocked in Acquire waiting for reads
  double write_wait_seconds = 0.0;  // host time blocked waiting for write-backs
};

class ShardStore {
 public:
  enum class Access { kRead, kOverwrite };

  static StatusOr<std::unique_ptr<ShardStore>> Create(const ShardStoreOptions& options,
                                                      std::vector<SlotShape> slots, Device& device);
  ~ShardStore();
  ShardStore(const ShardStore&) = delete;
  ShardStore& operator=(const ShardStore&) = delete;

  StatusOr<SlotView> Acquire(int slot, Access access = Access::kRead);
  Status Release(int slot, bool dirty);
  // Whether Acquire(slot) would find a buffer now (without failing for lack of one): the slot
  // is in memory or in flight, or a buffer is free, clean, or writing back.
  bool CanAcquire(int slot) const;
  Status Flush();
  void EndPass();

  int num_slots() const { return int(slots_.size()); }
  const SlotShape& shape(int slot) const { return slots_[size_t(slot)].shape; }
  SlotResidency residency(int slot) const { return slots_[size_t(slot)].state; }
  // Where the arrays are: kDevice, kNvme, or for host memory kPinnedHost when every slot got
  // pinned memory and kHost when any is pageable (pin mode, memlock fallback).
  MemoryTier tier() const { return tier_; }
  const ShardStoreStats& stats() const { return stats_; }
  // The NVMe file (empty for memory tiers) and the I/O backend in use.
  std::string path() const;
  std::string io_backend() const;
  // Bytes of one slot as laid out (arrays aligned), and of all slots.
  int64_t slot_bytes(int slot) const { return slots_[size_t(slot)].bytes; }
  int64_t total_bytes() const { return total_bytes_; }

 private:
  struct Slot {
    SlotShape shape;
    std::vector<int64_t> array_offsets;  // within the slot's bytes
    int64_t bytes = 0;                   // aligned total
    int64_t file_offset = 0;             // kNvme
    SlotResidency state = SlotResidency::kResident;
    bool acquired = false;
    bool prefetched = false;  // its read was started by a prefetch
    int buffer = -1;          // kNvme: the staging buffer, or -1
    TieredBuffer memory;      // memory tiers
    IoHandle io;              // kFetching / kWritingBack
  };

  ShardStore(const ShardStoreOptions& options, Device& device, size_t num_slots);
  bool nvme() const { return options_.tier == MemoryTier::kNvme; }
  // The one transition point: checks `from` -> `to` is allowed.
  void Move(Slot& s, SlotResidency to);
  char* BufferOf(const Slot& s) const;
  SlotView ViewOf(const Slot& s) const;
  // A staging buffer for a new read: a free one, else one holding a clean unacquired slot, else
  // (may_wait) the oldest write-back's once it finished (except the newest when prefetching).
  StatusOr<std::optional<int>> TakeBuffer(bool prefetching, int for_slot);
  Status WaitIo(Slot& s);  // waits for s's read or write, moving it to kResident
  Status StartRead(Slot& s, bool prefetch);
  Status Prefetch();
  Status Broken() const;
  Status Fail(Status status);  // remembers the first error

  const ShardStoreOptions options_;
  Device& device_;
  std::vector<Slot> slots_;
  int64_t total_bytes_ = 0;
  MemoryTier tier_ = MemoryTier::kDevice;
  std::unique_ptr<NvmeStore> file_;
  std::unique_ptr<PinnedBufferPool> buffers_;
  std::deque<int> writes_;  // slots in kWritingBack, oldest first
  std::vector<int> lru_;    // clean unacquired resident NVMe slots, least recently used first
  ExecutionTrace trace_;
  ShardStoreStats stats_;
  Status first_error_;
  int wait_track_ = -1;  // options_.trace's "offload wait" track
};

}  // namespace zs
