// DeviceBuffer: one allocation of a Device, owned (RAII, move-only) by whoever holds it.
//
// Contract
// - Created only by Device::Allocate (device.h). It remembers its device, pointer, size, tier
//   and category; destroying it (or Reset()) frees the memory through that device and removes
//   the bytes from the device's MemoryTracker.
// - Freeing does not wait for queued stream work: the holder must make sure no stream still
//   reads or writes the buffer (synchronize the stream or an event recorded after the last use)
//   before the buffer dies. On CUDA, freeing device memory (cudaFree) blocks the host until the
//   GPU is idle; keep allocation out of hot loops (pools come later, in offload/).
// - The device must outlive its buffers. A DeviceBuffer is not thread-safe itself; the bytes it
//   points to are guarded by whatever stream or lock the holder uses.
// - A zero-byte allocation gives a valid buffer with data() == nullptr and size() == 0.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/device/memory_tracker.h"

namespace zs {

class Device;

class DeviceBuffer {
 public:
  DeviceBuffer() = default;  // holds nothing
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = static_cast<DeviceBuffer&&>(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }
  MemoryTier tier() const { return tier_; }
  MemoryCategory category() const { return category_; }
  Device* device() const { return device_; }
  // True while the buffer holds an allocation (also a zero-byte one).
  explicit operator bool() const { return device_ != nullptr; }

  // Frees the memory now (see the contract above); the buffer then holds nothing.
  void Reset();

 private:
  friend class Device;
  DeviceBuffer(Device* device, void* data, size_t size, MemoryTier tier, MemoryCategory category)
      : device_(device), data_(data), size_(size), tier_(tier), category_(category) {}

  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
  MemoryTier tier_ = MemoryTier::kHost;
  MemoryCategory category_ = MemoryCategory::kOther;
};

}  // namespace zs
