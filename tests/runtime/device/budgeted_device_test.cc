#include "runtime/device/budgeted_device.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace zs {
namespace {

constexpr MemoryTier kDev = MemoryTier::kDevice;
constexpr size_t kKiB = 1024;

TEST(BudgetedDeviceTest, OutOfMemoryNamesRequestCategoryCapacityAndUse) {
  MemoryTracker tracker;
  BudgetedDevice dev(tracker, 1024 * kKiB);
  EXPECT_EQ(dev.name(), "budgeted-cpu");
  EXPECT_EQ(dev.Capacity(kDev), 1024 * kKiB);
  auto params = dev.Allocate(512 * kKiB, kDev, MemoryCategory::kParameters);
  auto opt = dev.Allocate(468 * kKiB, kDev, MemoryCategory::kOptimizerStates);
  ASSERT_TRUE(params.ok() && opt.ok());
  const MemorySnapshot before = tracker.Snapshot();

  auto grads = dev.Allocate(64 * kKiB, kDev, MemoryCategory::kGradients);
  ASSERT_FALSE(grads.ok());
  EXPECT_EQ(grads.status().code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(grads.status().message(),
            "out of device memory: requested 64.0 KiB for gradients on budgeted-cpu (capacity "
            "1.0 MiB); device in use 980.0 KiB (parameters 512.0 KiB, optimizer_states 468.0 "
            "KiB)");

  // Nothing was allocated or counted by the failure.
  const MemorySnapshot after = tracker.Snapshot();
  EXPECT_EQ(after.current, before.current);
  EXPECT_EQ(after.peak, before.peak);
  EXPECT_EQ(dev.InUse(kDev), 980 * kKiB);

  // Exactly up to the capacity fits; one byte more does not.
  auto rest = dev.Allocate(44 * kKiB, kDev, MemoryCategory::kGradients);
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  EXPECT_EQ(dev.Allocate(1, kDev, MemoryCategory::kOther).status().code(),
            StatusCode::kOutOfMemory);

  // Freeing gives the budget back.
  params->Reset();
  auto again = dev.Allocate(64 * kKiB, kDev, MemoryCategory::kGradients);
  EXPECT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(tracker.Current(kDev, MemoryCategory::kGradients), int64_t(108 * kKiB));
}

TEST(BudgetedDeviceTest, RequestLargerThanCapacityOnEmptyDevice) {
  MemoryTracker tracker;
  BudgetedDevice dev(tracker, 1 << 20);
  auto b = dev.Allocate(size_t{3} << 30, kDev, MemoryCategory::kActivations);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(),
            "out of device memory: requested 3.00 GiB for activations on budgeted-cpu "
            "(capacity 1.0 MiB); device in use 0 B");
  EXPECT_EQ(tracker.Snapshot().total_peak, 0);
}

TEST(BudgetedDeviceTest, PinnedCapacityIsOptionalAndHostIsNeverCapped) {
  MemoryTracker tracker;
  BudgetedDevice uncapped(tracker, 4 * kKiB);
  EXPECT_FALSE(uncapped.Capacity(MemoryTier::kPinnedHost).has_value());
  EXPECT_TRUE(uncapped.Allocate(64 * kKiB, MemoryTier::kPinnedHost, MemoryCategory::kOther).ok());

  BudgetedDevice capped(tracker, 4 * kKiB, 8 * kKiB);
  auto p = capped.Allocate(8 * kKiB, MemoryTier::kPinnedHost, MemoryCategory::kCommBuffers);
  ASSERT_TRUE(p.ok());
  auto q = capped.Allocate(1, MemoryTier::kPinnedHost, MemoryCategory::kCommBuffers);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().message(),
            "out of pinned_host memory: requested 1 B for comm_buffers on budgeted-cpu "
            "(capacity 8.0 KiB); pinned_host in use 8.0 KiB (comm_buffers 8.0 KiB)");
  EXPECT_TRUE(capped.Allocate(1 << 20, MemoryTier::kHost, MemoryCategory::kOther).ok());
}

// Concurrent allocations never take the tier past its capacity (the peak the tracker saw is
// the proof), and everything is given back.
TEST(BudgetedDeviceTest, ConcurrentAllocationsStayWithinCapacity) {
  MemoryTracker tracker;
  constexpr size_t kCapacity = 64 * kKiB, kChunk = 4 * kKiB;
  BudgetedDevice dev(tracker, kCapacity);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&dev] {
      for (int round = 0; round < 50; ++round) {
        std::vector<DeviceBuffer> held;
        for (int i = 0; i < 8; ++i) {
          auto b = dev.Allocate(kChunk, kDev, MemoryCategory::kActivations);
          if (b.ok()) {
            held.push_back(std::move(b).value());
          } else {
            ZS_CHECK(b.status().code() == StatusCode::kOutOfMemory, "{}", b.status().ToString());
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(tracker.TierPeak(kDev), int64_t(kCapacity));
  EXPECT_GE(tracker.TierPeak(kDev), int64_t(kChunk));  // the first allocation always fits
  EXPECT_EQ(tracker.TierCurrent(kDev), 0);
  EXPECT_EQ(dev.InUse(kDev), 0u);
}

}  // namespace
}  // namespace zs
