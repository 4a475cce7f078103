#include "runtime/device/budgeted_device.h"

#include <fmt/format.h>

namespace zs {

BudgetedDevice::BudgetedDevice(MemoryTracker& tracker, size_t device_capacity,
                               std::optional<size_t> pinned_capacity)
    : CpuDevice("budgeted-cpu", tracker),
      device_capacity_(device_capacity),
      pinned_capacity_(pinned_capacity) {}

std::optional<size_t> BudgetedDevice::Capacity(MemoryTier tier) const {
  if (tier == MemoryTier::kDevice) return device_capacity_;
  if (tier == MemoryTier::kPinnedHost) return pinned_capacity_;
  return std::nullopt;
}

size_t BudgetedDevice::InUse(MemoryTier tier) const {
  std::lock_guard<std::mutex> lock(mu_);
  return size_t(used_.TierCurrent(tier));
}

StatusOr<void*> BudgetedDevice::AllocateRaw(size_t bytes, MemoryTier tier,
                                            MemoryCategory category) {
  const std::optional<size_t> capacity = Capacity(tier);
  const int t = int(tier), k = int(category);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t in_use = size_t(used_.tier_current[t]);
    if (capacity && bytes > *capacity - std::min(in_use, *capacity)) {
      return OutOfMemoryError(fmt::format(
          "out of {} memory: requested {} for {} on {} (capacity {}); {}", MemoryTierName(tier),
          FormatBytes(int64_t(bytes)), MemoryCategoryName(category), name(),
          FormatBytes(int64_t(*capacity)), used_.InUseSummary(tier)));
    }
    // Reserve first so concurrent allocations cannot both pass the check.
    used_.current[t][k] += int64_t(bytes);
    used_.tier_current[t] += int64_t(bytes);
  }
  StatusOr<void*> ptr = CpuDevice::AllocateRaw(bytes, tier, category);
  if (!ptr.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    used_.current[t][k] -= int64_t(bytes);
    used_.tier_current[t] -= int64_t(bytes);
  }
  return ptr;
}

void BudgetedDevice::FreeRaw(void* ptr, size_t bytes, MemoryTier tier, MemoryCategory category) {
  CpuDevice::FreeRaw(ptr, bytes, tier, category);
  std::lock_guard<std::mutex> lock(mu_);
  used_.current[int(tier)][int(category)] -= int64_t(bytes);
  used_.tier_current[int(tier)] -= int64_t(bytes);
}

}  // namespace zs
