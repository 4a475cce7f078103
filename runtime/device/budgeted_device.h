// BudgetedDevice: a CpuDevice whose device tier (and optionally its pinned-host tier) has a
// fixed capacity, so CPU ranks run into the same out-of-memory walls a GPU would, and tests
// and demos can show what ZeRO stages and offload save.
//
// Contract (beyond cpu_device.h)
// - An allocation that would take a capped tier past its capacity fails with kOutOfMemory and
//   nothing is allocated or counted. The message names the request, its category, the device,
//   the capacity and what the device holds in that tier by category, e.g.
//     "out of device memory: requested 64.0 MiB for gradients on budgeted-cpu (capacity
//      1.00 GiB); device in use 980.0 MiB (parameters 512.0 MiB, optimizer_states 468.0 MiB)"
// - Usage is counted by this device itself (requested bytes, as in the MemoryTracker), so a
//   tracker shared with other devices does not change its budget.
// - Thread-safe: the check and the reservation are one step under a mutex.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

#include "runtime/device/cpu_device.h"

namespace zs {

class BudgetedDevice : public CpuDevice {
 public:
  // pinned_capacity: none means the pinned-host tier is not capped. kHost is never capped.
  BudgetedDevice(MemoryTracker& tracker, size_t device_capacity,
                 std::optional<size_t> pinned_capacity = std::nullopt);

  // The cap of `tier`, or none.
  std::optional<size_t> Capacity(MemoryTier tier) const;
  // Bytes this device holds in `tier` now.
  size_t InUse(MemoryTier tier) const;

 protected:
  StatusOr<void*> AllocateRaw(size_t bytes, MemoryTier tier, MemoryCategory category) override;
  void FreeRaw(void* ptr, size_t bytes, MemoryTier tier, MemoryCategory category) override;

 private:
  const size_t device_capacity_;
  const std::optional<size_t> pinned_capacity_;
  mutable std::mutex mu_;
  MemorySnapshot used_;  // guarded by mu_: current bytes by tier and category (peaks unused)
};

}  // namespace zs
