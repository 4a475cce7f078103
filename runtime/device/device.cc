#include "runtime/device/device.h"

#include <fmt/format.h>

namespace zs {

std::string_view DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return "cuda";
  }
  return "?";
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this == &other) return *this;
  Reset();
  device_ = other.device_;
  data_ = other.data_;
  size_ = other.size_;
  tier_ = other.tier_;
  category_ = other.category_;
  other.device_ = nullptr;
  other.data_ = nullptr;
  other.size_ = 0;
  return *this;
}

void DeviceBuffer::Reset() {
  if (device_ == nullptr) return;
  device_->Release(*this);
  device_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

std::string Device::DescribeRequest(size_t bytes, MemoryTier tier, MemoryCategory category) const {
  return fmt::format("requested {} for {} in {} memory on {}", FormatBytes(int64_t(bytes)),
                     MemoryCategoryName(category), MemoryTierName(tier), name_);
}

Status Device::CheckCopyArgs(std::string_view call, void* dst, const void* src,
                             size_t bytes) const {
  if (bytes == 0) return OkStatus();
  if (dst == nullptr || (src == nullptr && call != "MemsetAsync")) {
    return InvalidArgumentError(fmt::format("{} on {}: null pointer (dst {}, src {}, {} bytes)",
                                            call, name_, dst, src, bytes));
  }
  if (src == nullptr) return OkStatus();
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (d < s + bytes && s < d + bytes) {
    return InvalidArgumentError(fmt::format("{} on {}: ranges overlap (dst {}, src {}, {} bytes)",
                                            call, name_, dst, src, bytes));
  }
  return OkStatus();
}

StatusOr<DeviceBuffer> Device::Allocate(size_t bytes, MemoryTier tier, MemoryCategory category) {
  if (!Supports(tier)) {
    return InvalidArgumentError(fmt::format("{} has no {} memory (requested {} bytes for {})",
                                            name_, MemoryTierName(tier), bytes,
                                            MemoryCategoryName(category)));
  }
  // Far past any real memory; also keeps rounding up to the alignment from overflowing.
  constexpr size_t kMaxBytes = size_t{1} << 56;
  if (bytes > kMaxBytes) {
    return OutOfMemoryError(
        fmt::format("out of {} memory: {} bytes for {} on {} is more than any "
                    "device has",
                    MemoryTierName(tier), bytes, MemoryCategoryName(category), name_));
  }
  void* ptr = nullptr;
  if (bytes > 0) {
    ZS_ASSIGN_OR_RETURN(ptr, AllocateRaw(bytes, tier, category));
    ZS_CHECK(ptr != nullptr && reinterpret_cast<uintptr_t>(ptr) % Alignment(tier) == 0,
             "{}: AllocateRaw returned {} for {} bytes of {} (alignment {})", name_, ptr, bytes,
             MemoryTierName(tier), Alignment(tier));
  }
  tracker_.Add(tier, category, int64_t(bytes));
  return DeviceBuffer(this, ptr, bytes, tier, category);
}

void Device::Release(DeviceBuffer& buffer) {
  // Uncount first, free second (and count after allocating): the tracker then never shows
  // more than a budgeted tier holds, even while other threads allocate what this frees.
  tracker_.Sub(buffer.tier_, buffer.category_, int64_t(buffer.size_));
  if (buffer.data_ != nullptr) FreeRaw(buffer.data_, buffer.size_, buffer.tier_, buffer.category_);
}

}  // namespace zs
