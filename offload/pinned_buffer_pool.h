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

class PinnedBufferPool {
 public:
  static StatusOr<std::unique_ptr<PinnedBufferPool>> Create(Device& device, int64_t count,
                                                            size_t bytes, bool pin,
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
  std::vector<DeviceBuffer> buffers_;
  std::vector<int> free_;
  std::vector<bool> out_;
  size_t bytes_ = 0;
  bool pinned_ = false;
  bool locked_ = false;  // buffers were mlock'ed (CPU device)
};

}  // namespace zs
