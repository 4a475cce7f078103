// Device: memory, streams and events of one compute device (a CPU rank or one GPU), behind
// one interface so that every layer above runs unchanged on CPU ranks and on CUDA.
//
// Contract
// - Ownership: a Device is owned by its caller (usually one per rank, from CreateDevice in
//   device_factory.h). It records every allocation in the MemoryTracker given at construction
//   (one per rank, not owned: it must outlive the device). Buffers, streams and events must be
//   destroyed before the device that made them.
// - Memory tiers: kDevice (GPU memory; on a CPU device, host memory tagged as the device tier so
//   CPU ranks run the whole runtime), kPinnedHost (page-locked on CUDA; plain memory on CPU) and
//   kHost. kNvme is never a device tier (offload/ owns it). Alignment is at least 64 bytes;
//   host tiers are 4 KiB aligned so O_DIRECT I/O works on them.
// - Threads: every method may be called from any thread. Work queued on one stream runs in the
//   order the queueing calls returned.
// - Errors: misuse that is a programmer bug (a stream of another device) is a ZS_CHECK; every
//   other failure (out of memory, a driver error) is a Status naming the call and the sizes.
//
// What blocks (the host thread that calls):
//   Allocate            the host, for the allocation itself (CUDA: cudaMalloc/cudaHostAlloc).
//   DeviceBuffer free   the host; CUDA's cudaFree/cudaFreeHost also wait for the whole GPU.
//   CreateStream/Event  the host, briefly (CPU: starts the stream's worker thread).
//   CopyAsync           nothing: queued on the stream. CUDA with pageable (kHost) memory may
//                       stage through the driver and return only once the source is read.
//   MemsetAsync         nothing: queued on the stream.
//   LaunchHostFunc      nothing: fn runs later on a host thread, in stream order, and blocks
//                       that stream while it runs. fn must not call the device (CUDA forbids
//                       CUDA calls in host functions; on CPU it could wait on itself).
//   RecordEvent         nothing.
//   StreamWaitEvent     nothing: the stream (not the host) waits for the event.
//   QueryEvent          nothing: reports whether the event has completed.
//   SynchronizeEvent    the host, until the event completes.
//   SynchronizeStream   the host, until all work queued on the stream so far has finished.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/base/status.h"
#include "runtime/device/device_buffer.h"
#include "runtime/device/memory_tracker.h"
#include "runtime/device/stream.h"

namespace zs {

enum class DeviceKind : uint8_t { kCpu = 0, kCuda };
std::string_view DeviceKindName(DeviceKind kind);  // "cpu", "cuda"

// The smallest alignment of any allocation, and the alignment of host-tier allocations.
inline constexpr size_t kMinDeviceAlignment = 64;
inline constexpr size_t kHostAlignment = 4096;

class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // "cpu", "budgeted-cpu", "cuda:0": used in every error message about this device.
  const std::string& name() const { return name_; }
  DeviceKind kind() const { return kind_; }
  MemoryTracker& tracker() const { return tracker_; }

  virtual bool Supports(MemoryTier tier) const = 0;
  // The alignment every allocation of `tier` gets (a power of two, >= kMinDeviceAlignment).
  virtual size_t Alignment(MemoryTier tier) const = 0;

  // Allocates `bytes` in `tier`, recorded under `category`. Errors: InvalidArgument for a tier
  // this device lacks; OutOfMemory naming the request, the category, the device and what is in
  // use; Internal for other driver errors. Memory is not initialized.
  StatusOr<DeviceBuffer> Allocate(size_t bytes, MemoryTier tier, MemoryCategory category);

  virtual StatusOr<std::unique_ptr<Stream>> CreateStream() = 0;
  virtual StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;

  // Copies `bytes` from src to dst, both in any of this device's tiers, in stream order.
  // Both ranges must stay valid until the copy has run; they must not overlap.
  virtual Status CopyAsync(void* dst, const void* src, size_t bytes, Stream& stream) = 0;
  // Sets `bytes` bytes at dst to (unsigned char)value, in stream order.
  virtual Status MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) = 0;
  // Runs fn on a host thread once all work queued on the stream before it has finished; work
  // queued after it waits for fn to return. This is how CPU "kernels" and offload steps are
  // queued. fn must not throw.
  virtual Status LaunchHostFunc(Stream& stream, std::function<void()> fn) = 0;

  // Marks the current end of `stream` in `event`.
  virtual Status RecordEvent(Event& event, Stream& stream) = 0;
  // Work queued on `stream` after this call waits until `event` (as last recorded before this
  // call) completes. The event may belong to another stream of this device.
  virtual Status StreamWaitEvent(Stream& stream, Event& event) = 0;
  virtual StatusOr<bool> QueryEvent(Event& event) = 0;
  virtual Status SynchronizeEvent(Event& event) = 0;
  virtual Status SynchronizeStream(Stream& stream) = 0;

 protected:
  Device(std::string name, DeviceKind kind, MemoryTracker& tracker)
      : name_(std::move(name)), kind_(kind), tracker_(tracker) {}

  // Allocates at least `bytes` (> 0) with Alignment(tier); `tier` is supported. Errors as for
  // Allocate. Called from any thread.
  virtual StatusOr<void*> AllocateRaw(size_t bytes, MemoryTier tier, MemoryCategory category) = 0;
  // Frees what AllocateRaw returned for the same bytes, tier and category.
  virtual void FreeRaw(void* ptr, size_t bytes, MemoryTier tier, MemoryCategory category) = 0;

  // "requested 64.0 MiB for gradients in device memory on cuda:0": the start of OOM messages.
  std::string DescribeRequest(size_t bytes, MemoryTier tier, MemoryCategory category) const;
  // InvalidArgument for a null pointer with bytes > 0 or overlapping ranges; names the call.
  Status CheckCopyArgs(std::string_view call, void* dst, const void* src, size_t bytes) const;

 private:
  friend class DeviceBuffer;
  void Release(DeviceBuffer& buffer);

  const std::string name_;
  const DeviceKind kind_;
  MemoryTracker& tracker_;
};

}  // namespace zs
