// CountingDevice: allocations are counted in the tracker by tier and category, addresses are
// distinct and aligned, nothing is backed by memory (a petabyte is fine), and every call that
// would touch memory fails naming the call.
#include "runtime/device/counting_device.h"

#include <gtest/gtest.h>

#include <set>

namespace zs {
namespace {

TEST(CountingDevice, CountsWithoutMemory) {
  MemoryTracker tracker;
  CountingDevice device(tracker);
  EXPECT_EQ(device.kind(), DeviceKind::kCuda);
  EXPECT_FALSE(device.Supports(MemoryTier::kNvme));
  std::set<uintptr_t> seen;
  {
    auto huge = device.Allocate(size_t{1} << 50, MemoryTier::kDevice, MemoryCategory::kParameters);
    ASSERT_TRUE(huge.ok()) << huge.status().ToString();
    auto pinned = device.Allocate(100, MemoryTier::kPinnedHost, MemoryCategory::kCommBuffers);
    ASSERT_TRUE(pinned.ok());
    for (const DeviceBuffer* b : {&*huge, &*pinned}) {
      const auto p = reinterpret_cast<uintptr_t>(b->data());
      EXPECT_EQ(p % device.Alignment(b->tier()), 0u);
      EXPECT_TRUE(seen.insert(p).second);
    }
    EXPECT_EQ(tracker.Current(MemoryTier::kDevice, MemoryCategory::kParameters), int64_t{1} << 50);
    EXPECT_EQ(tracker.Current(MemoryTier::kPinnedHost, MemoryCategory::kCommBuffers), 100);
  }
  EXPECT_EQ(tracker.TierCurrent(MemoryTier::kDevice), 0);
  EXPECT_EQ(tracker.Peak(MemoryTier::kDevice, MemoryCategory::kParameters), int64_t{1} << 50);
}

TEST(CountingDevice, CallsThatTouchMemoryFail) {
  MemoryTracker tracker;
  CountingDevice device(tracker, DeviceKind::kCpu, "planned");
  auto stream = device.CreateStream();
  auto event = device.CreateEvent();
  ASSERT_TRUE(stream.ok() && event.ok());
  char a[8], b[8];
  const Status copy = device.CopyAsync(a, b, 8, **stream);
  EXPECT_EQ(copy.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(copy.message().find("planned: CopyAsync of 8 bytes"), std::string::npos);
  EXPECT_EQ(device.MemsetAsync(a, 0, 8, **stream).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(device.LaunchHostFunc(**stream, [] {}).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(device.RecordEvent(**event, **stream).ok());
  EXPECT_TRUE(device.SynchronizeStream(**stream).ok());
  auto done = device.QueryEvent(**event);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
}

}  // namespace
}  // namespace zs
