// CpuDevice: the Device of a CPU rank. Every tier is host memory: kHost and kPinnedHost are
// plain 4 KiB-aligned memory, and kDevice is host memory (256-byte aligned, like cudaMalloc)
// tagged as the device tier, so CPU ranks run the whole runtime and their "device" bytes are
// counted apart from offloaded ones.
//
// Contract (beyond device.h)
// - A Stream is one worker thread that runs the stream's queued work in FIFO order, so copies,
//   memsets and host functions really are asynchronous to the caller.
// - An Event is a sequence number on one stream: RecordEvent captures how many items had been
//   queued on the stream; the event completes when the stream has finished that many.
//   StreamWaitEvent queues an item that makes the stream's worker (never the host) wait.
// - Destroying a stream runs what is still queued on it, then joins its worker. Events may
//   outlive the stream they were recorded on (they then count as complete).
// - Thread-safe; the allocator is std::aligned_alloc.
#pragma once

#include <memory>
#include <string>

#include "runtime/device/device.h"

namespace zs {

class CpuDevice : public Device {
 public:
  explicit CpuDevice(MemoryTracker& tracker) : CpuDevice("cpu", tracker) {}

  bool Supports(MemoryTier tier) const override;
  size_t Alignment(MemoryTier tier) const override;

  StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  Status CopyAsync(void* dst, const void* src, size_t bytes, Stream& stream) override;
  Status MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) override;
  Status LaunchHostFunc(Stream& stream, std::function<void()> fn) override;
  Status RecordEvent(Event& event, Stream& stream) override;
  Status StreamWaitEvent(Stream& stream, Event& event) override;
  StatusOr<bool> QueryEvent(Event& event) override;
  Status SynchronizeEvent(Event& event) override;
  Status SynchronizeStream(Stream& stream) override;

 protected:
  CpuDevice(std::string name, MemoryTracker& tracker);

  StatusOr<void*> AllocateRaw(size_t bytes, MemoryTier tier, MemoryCategory category) override;
  void FreeRaw(void* ptr, size_t bytes, MemoryTier tier, MemoryCategory category) override;
};

}  // namespace zs
