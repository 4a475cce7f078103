// CountingDevice: a Device that only counts. Allocate records the request in the MemoryTracker
// as every device does and hands back a distinct, aligned address that is never backed by
// memory, so the runtime's real allocation code (ShardStore, GradientReducer, GatherCoordinator,
// TileCopyPipeline) can be run for a model that does not fit this host, and the tracker's peaks
// say what that model would need (runtime/plan, the zero-plan tool).
//
// Contract (beyond device.h)
// - Nothing is ever read or written: CopyAsync, MemsetAsync and LaunchHostFunc return
//   FailedPrecondition naming the call (code that touches memory cannot be planned here).
//   Streams and events exist and are always complete; the synchronizing calls return at once.
// - Supports kDevice, kPinnedHost and kHost (kNvme is offload/'s, as on every device); every
//   tier's alignment is kHostAlignment. `kind` is the kind of device being planned (kCuda by
//   default: pinned host memory is then counted as pinned_host without locking pages).
// - Addresses come from a counter starting far from any real mapping and never repeat; the
//   counter may run for up to 2^62 bytes in total, far past any plan.
// - Thread-safe: the counter is atomic; the tracker is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "runtime/device/device.h"

namespace zs {

class CountingDevice final : public Device {
 public:
  explicit CountingDevice(MemoryTracker& tracker, DeviceKind kind = DeviceKind::kCuda,
                          std::string name = "counting");

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
  StatusOr<void*> AllocateRaw(size_t bytes, MemoryTier tier, MemoryCategory category) override;
  void FreeRaw(void* ptr, size_t bytes, MemoryTier tier, MemoryCategory category) override;

 private:
  std::atomic<uint64_t> next_;  // the next address handed out
};

}  // namespace zs
