// CudaDevice: the Device of one NVIDIA GPU, over the CUDA runtime API (target zs_device_cuda,
// built only when CMake found a CUDA toolkit; plain C++ files, no kernels).
//
// Contract (beyond device.h)
// - Memory: kDevice is cudaMalloc (256-byte aligned), kPinnedHost is cudaHostAlloc (page
//   aligned, rounded up to 4 KiB), kHost is 4 KiB-aligned std::aligned_alloc.
// - Streams are non-blocking cudaStreams; events are cudaEvents without timing. LaunchHostFunc
//   is cudaLaunchHostFunc: fn runs on a CUDA driver thread and must not call CUDA (nor this
//   device). Destroying a stream synchronizes it first.
// - Every call first makes this device current on the calling thread (cudaSetDevice), so any
//   thread may use it. Every CUDA error becomes a Status naming the call, the device, the size
//   and the CUDA error string; cudaErrorMemoryAllocation becomes kOutOfMemory and adds what
//   the tracker holds in that tier.
// - Create() fails with kUnavailable when there is no driver, no device, or no such ordinal.
#pragma once

#include <memory>

#include "runtime/device/device.h"
#include "runtime/device/device_factory.h"

namespace zs {

// The number of CUDA devices, or 0 on any error (no driver returns cudaErrorInsufficientDriver
// and leaves the count untouched). Never fails.
int CudaDeviceCount();

class CudaDevice : public Device {
 public:
  static StatusOr<std::unique_ptr<CudaDevice>> Create(int ordinal, MemoryTracker& tracker);

  int ordinal() const { return ordinal_; }

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
  CudaDevice(int ordinal, MemoryTracker& tracker);
  Status MakeCurrent(std::string_view call) const;

  const int ordinal_;
};

// The factory entry for "cuda:<ordinal>" (reached through a hook CMake generates; a kind of
// CreateDevice only in programs that link zs_device_cuda, zerostack::cuda).
DeviceFactoryEntry CudaDeviceFactory();

}  // namespace zs
