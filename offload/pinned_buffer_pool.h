// PinnedBufferPool: a fixed set of equal, 4 KiB-aligned host buffers for offload transfers
// (NVMe staging, device<->host copies), allocated once and handed out and back by index; and
// PinHostMemory, the one memlock check every page-locked allocation of offload/ goes through.
//
// Contract
// - Create() allocates `count` buffers of `bytes` each (rounded up to kPinAlignment) from
//   `device`, in MemoryTier::kPinnedHost when `pin` is set, else kHost, counted under
//   `category`. Nothing is allocated after Create, so a transfer never waits for the allocator.
// - [Note: memlock] Pinning is page locking, limited per process by RLIMIT_MEMLOCK (`ulimit
//   -l`). On a CPU device (where kPinnedHost is plain memory) the pool locks its buffers with
//   mlock, so "pinned" means the same as on a GPU host. PinHostMemory checks the bytes asked for,
//   plus what offload/ already locked in this process (ranks as threads share the limit),
//   against RLIMIT_MEMLOCK before locking, also in processes privileged to exceed it, so a
//   config behaves the same under every user. Too low a limit is kOutOfMemory naming the limit,
//   the bytes asked for and what to do ("raise `ulimit -l` or set pin_memory: false"); there is
//   no silent fallback to pageable memory. CUDA devices pin through the driver (cudaHostAlloc)
//   and are not checked here.
// - Take() returns a free buffer's index (none when all are out); Give(i) returns it. The pool
//   does not know what a buffer holds: its owner (ShardStore, TileCopyPipeline) does.
// - Threads: one thread (the rank's) calls Take/Give; the buffers' bytes are guarded by
//   whatever I/O or stream the owner waits on. Nothing here blocks but Create (allocation,
//   mlock) and the destructor (munlock, free).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/device/device.h"

namespace zs {

inline constexpr size_t kPinAlignment = 4096;

// Page-locked host memory on a CPU device: checks RLIMIT_MEMLOCK ([Note: memlock]) and mlocks
// [ptr, ptr + bytes). `what` names the memory in errors ("NVMe staging buffers of rank 0").
// Undo with UnpinHostMemory(ptr, bytes) before the memory is freed.
Status PinHostMemory(void* ptr, size_t bytes, const std::string& what);
void UnpinHostMemory(void* ptr, size_t bytes);
// Bytes offload/ holds locked in this process now.
size_t PinnedBytesInProcess();
// The RLIMIT_MEMLOCK soft limit in bytes (none: unlimited).
std::optional<size_t> MemlockLimitBytes();

// How offload/ allocates host memory: pageable (kHost), pinned (kPinnedHost; too low a
// memlock limit is an error), or pinned where the limit allows and pageable beyond it (the
// config's pin_memory with zerostack.pin_memory_fallback; the fallback is logged once per
// process and the memory is counted as kHost, as it is).
enum class PinMode : uint8_t { kPageable, kPinned, kPinnedOrPageable };
PinMode PinModeFor(bool pin_memory, bool fallback);

// The tier `bytes` more of host memory get under `mode` on `device`: kHost for kPageable;
// kPinnedHost on a CUDA device (the driver pins) or where the memlock limit allows; otherwise
// the limit error (kPinned) or kHost after logging the fallback once (kPinnedOrPageable).
StatusOr<MemoryTier> HostTierFor(Device& device, size_t bytes, PinMode mode,
                                 const std::string& what);

// A DeviceBuffer in any tier whose pages are locked when it is kPinnedHost on a CPU device, and
// unlocked before it is freed. Move-only. What the engine keeps in host memory under offload.
class TieredBuffer {
 public:
  // Device memory (tier kDevice) or host memory as HostTierFor decides.
  static StatusOr<TieredBuffer> Allocate(Device& device, size_t bytes, MemoryTier tier,
                                         PinMode mode, MemoryCategory category,
                                         const std::string& what);
  TieredBuffer() = default;
  TieredBuffer(TieredBuffer&& other) noexcept;
  TieredBuffer& operator=(TieredBuffer&& other) noexcept;
  ~TieredBuffer();

  void* data() const { return buffer_.data(); }
  template <typename T>
  T* data_as() const {
    return buffer_.data_as<T>();
  }
  size_t size() const { return buffer_.size(); }
  MemoryTier tier() const { return buffer_.tier(); }
  explicit operator bool() const { return bool(buffer_); }

 private:
  void Unlock();
  DeviceBuffer buffer_;
  bool locked_ = false;
};

class PinnedBufferPool {
 public:
  // mode kPageable allocates kHost buffers; otherwise HostTierFor decides for all of them.
  static StatusOr<std::unique_ptr<PinnedBufferPool>> Create(Device& device, int64_t count,
                                                            size_t bytes, PinMode mode,
                                                            MemoryCategory category,
                                                            const std::string& what);
  ~PinnedBufferPool();
  PinnedBufferPool(const PinnedBufferPool&) = delete;
  PinnedBufferPool& operator=(const PinnedBufferPool&) = delete;

  int count() const { return int(buffers_.size()); }
  size_t buffer_bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }
  char* data(int index) const { return buffers_[size_t(index)].data_as<char>(); }

  std::optional<int> Take();
  void Give(int index);  // ZS_CHECK: an index taken and not yet given back
  int free_count() const { return int(free_.size()); }

 private:
  PinnedBufferPool() = default;
  // Allocates `count` buffers of bytes_ in `tier` (pinning them on a CPU device), after
  // dropping any held; on an error, what was allocated stays for Clear().
  Status Fill(Device& device, int64_t count, MemoryTier tier, MemoryCategory category,
              const std::string& what);
  void Clear();  // unpins and frees every buffer
  std::vector<DeviceBuffer> buffers_;
  std::vector<int> free_;
  std::vector<bool> out_;
  size_t bytes_ = 0;
  bool pinned_ = false;
  bool locked_ = false;  // buffers were mlock'ed (CPU device)
};

}  // namespace zs
