#include "offload/pinned_buffer_pool.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "runtime/base/check.h"
#include "runtime/base/log.h"

namespace zs {
namespace {

std::mutex g_pin_mu;
size_t g_pinned_bytes = 0;  // guarded by g_pin_mu

std::string Bytes(size_t b) {
  if (b >= (size_t{1} << 30)) return fmt::format("{:.2f} GiB", double(b) / double(1 << 30));
  if (b >= (size_t{1} << 20)) return fmt::format("{:.1f} MiB", double(b) / double(1 << 20));
  if (b >= (size_t{1} << 10)) return fmt::format("{:.1f} KiB", double(b) / double(1 << 10));
  return fmt::format("{} B", b);
}

}  // namespace

std::optional<size_t> MemlockLimitBytes() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return std::nullopt;
  }
  return size_t(limit.rlim_cur);
}

size_t PinnedBytesInProcess() {
  std::lock_guard<std::mutex> lock(g_pin_mu);
  return g_pinned_bytes;
}

// The error for `bytes` more than RLIMIT_MEMLOCK allows; g_pin_mu held.
Status MemlockLimitError(size_t bytes, const std::string& what, size_t limit) {
  return OutOfMemoryError(fmt::format(
      "pinning {} for {}: the memlock limit (RLIMIT_MEMLOCK, `ulimit -l`) is {} ({} bytes) and "
      "this process already pins {}; raise `ulimit -l` (to at least {} KiB), set pin_memory: "
      "false, or set zerostack.pin_memory_fallback: true",
      Bytes(bytes), what, Bytes(limit), limit, Bytes(g_pinned_bytes),
      (g_pinned_bytes + bytes + 1023) / 1024));
}

Status PinHostMemory(void* ptr, size_t bytes, const std::string& what) {
  if (bytes == 0) return OkStatus();
  std::lock_guard<std::mutex> lock(g_pin_mu);
  const std::optional<size_t> limit = MemlockLimitBytes();
  if (limit && g_pinned_bytes + bytes > *limit) return MemlockLimitError(bytes, what, *limit);
  if (mlock(ptr, bytes) != 0) {
    const int err = errno;
    return OutOfMemoryError(fmt::format("pinning {} for {}: mlock failed: {} (memlock limit {})",
                                        Bytes(bytes), what, std::strerror(err),
                                        limit ? Bytes(*limit) : std::string("unlimited")));
  }
  g_pinned_bytes += bytes;
  return OkStatus();
}

void UnpinHostMemory(void* ptr, size_t bytes) {
  if (bytes == 0) return;
  munlock(ptr, bytes);
  std::lock_guard<std::mutex> lock(g_pin_mu);
  ZS_CHECK(g_pinned_bytes >= bytes, "unpinning {} bytes, {} pinned", bytes, g_pinned_bytes);
  g_pinned_bytes -= bytes;
}

PinMode PinModeFor(bool pin_memory, bool fallback) {
  if (!pin_memory) return PinMode::kPageable;
  return fallback ? PinMode::kPinnedOrPageable : PinMode::kPinned;
}

StatusOr<MemoryTier> HostTierFor(Device& device, size_t bytes, PinMode mode,
                                 const std::string& what) {
  if (mode == PinMode::kPageable) return MemoryTier::kHost;
  if (device.kind() != DeviceKind::kCpu) return MemoryTier::kPinnedHost;
  Status refused;
  {
    std::lock_guard<std::mutex> lock(g_pin_mu);
    const std::optional<size_t> limit = MemlockLimitBytes();
    if (!limit || g_pinned_bytes + bytes <= *limit) return MemoryTier::kPinnedHost;
    refused = MemlockLimitError(bytes, what, *limit);
  }
  if (mode == PinMode::kPinned) return refused;
  static std::once_flag logged;
  std::call_once(logged, [&] {
    ZS_LOG(kWarn,
           "offload: {}; zerostack.pin_memory_fallback is set, so this and any later host "
           "memory that does not fit the limit is pageable (counted as host, not pinned_host)",
           refused.message());
  });
  return MemoryTier::kHost;
}

StatusOr<TieredBuffer> TieredBuffer::Allocate(Device& device, size_t bytes, MemoryTier tier,
                                              PinMode mode, MemoryCategory category,
                                              const std::string& what) {
  if (tier != MemoryTier::kDevice) {
    ZS_ASSIGN_OR_RETURN(tier, HostTierFor(device, bytes, mode, what));
  }
  TieredBuffer out;
  ZS_ASSIGN_OR_RETURN(out.buffer_, device.Allocate(bytes, tier, category));
  if (tier == MemoryTier::kPinnedHost && device.kind() == DeviceKind::kCpu) {
    Status pinned = PinHostMemory(out.buffer_.data(), out.buffer_.size(), what);
    if (!pinned.ok() && mode == PinMode::kPinnedOrPageable &&
        pinned.code() == StatusCode::kOutOfMemory) {
      // Another thread (a rank of this process) pinned between HostTierFor's check and this
      // one, and the limit is reached after all: pageable, as HostTierFor would have said.
      out.buffer_.Reset();
      ZS_ASSIGN_OR_RETURN(out.buffer_, device.Allocate(bytes, MemoryTier::kHost, category));
      return out;
    }
    ZS_RETURN_IF_ERROR(pinned);
    out.locked_ = true;
  }
  return out;
}

TieredBuffer::TieredBuffer(TieredBuffer&& other) noexcept
    : buffer_(std::move(other.buffer_)), locked_(std::exchange(other.locked_, false)) {}

TieredBuffer& TieredBuffer::operator=(TieredBuffer&& other) noexcept {
  if (this != &other) {
    Unlock();
    buffer_ = std::move(other.buffer_);
    locked_ = std::exchange(other.locked_, false);
  }
  return *this;
}

TieredBuffer::~TieredBuffer() { Unlock(); }

void TieredBuffer::Unlock() {
  if (locked_) UnpinHostMemory(buffer_.data(), buffer_.size());
  locked_ = false;
}

StatusOr<std::unique_ptr<PinnedBufferPool>> PinnedBufferPool::Create(Device& device, int64_t count,
                                                                     size_t bytes, PinMode mode,
                                                                     MemoryCategory category,
                                                                     const std::string& what) {
  if (count < 1) {
    return InvalidArgumentError(fmt::format("{}: buffer count {} (at least 1)", what, count));
  }
  auto pool = std::unique_ptr<PinnedBufferPool>(new PinnedBufferPool());
  pool->bytes_ = (bytes + kPinAlignment - 1) / kPinAlignment * kPinAlignment;
  // One decision for the whole pool before anything is allocated: an error names all of it.
  ZS_ASSIGN_OR_RETURN(const MemoryTier tier,
                      HostTierFor(device, pool->bytes_ * size_t(count), mode, what));
  Status filled = pool->Fill(device, count, tier, category, what);
  if (!filled.ok() && tier == MemoryTier::kPinnedHost && mode == PinMode::kPinnedOrPageable &&
      filled.code() == StatusCode::kOutOfMemory) {
    // Another thread (a rank of this process) pinned between HostTierFor's check and these
    // pins, and the limit is reached after all: pageable, as HostTierFor would have said.
    filled = pool->Fill(device, count, MemoryTier::kHost, category, what);
  }
  ZS_RETURN_IF_ERROR(filled);
  return pool;
}

Status PinnedBufferPool::Fill(Device& device, int64_t count, MemoryTier tier,
                              MemoryCategory category, const std::string& what) {
  Clear();
  pinned_ = tier == MemoryTier::kPinnedHost;
  const bool lock = pinned_ && device.kind() == DeviceKind::kCpu;
  for (int64_t i = 0; i < count; ++i) {
    auto buffer = device.Allocate(bytes_, tier, category);
    if (!buffer.ok()) {
      return buffer.status().WithContext(
          fmt::format("{}: buffer {} of {} ({} bytes each)", what, i, count, bytes_));
    }
    if (lock) {
      ZS_RETURN_IF_ERROR(PinHostMemory(buffer->data(), bytes_, what));
      locked_ = true;  // Clear() and the destructor unpin every buffer held
    }
    buffers_.push_back(std::move(*buffer));
    free_.push_back(int(count - 1 - i));  // Take() hands out 0, 1, ... first
    out_.push_back(false);
  }
  return OkStatus();
}

void PinnedBufferPool::Clear() {
  if (locked_) {
    for (DeviceBuffer& b : buffers_) UnpinHostMemory(b.data(), bytes_);
  }
  locked_ = false;
  buffers_.clear();
  free_.clear();
  out_.clear();
}

PinnedBufferPool::~PinnedBufferPool() { Clear(); }

std::optional<int> PinnedBufferPool::Take() {
  if (free_.empty()) return std::nullopt;
  const int i = free_.back();
  free_.pop_back();
  out_[size_t(i)] = true;
  return i;
}

void PinnedBufferPool::Give(int index) {
  ZS_CHECK(index >= 0 && index < count() && out_[size_t(index)],
           "PinnedBufferPool::Give({}): not a buffer taken from this pool", index);
  out_[size_t(index)] = false;
  free_.push_back(index);
}

}  // namespace zs
