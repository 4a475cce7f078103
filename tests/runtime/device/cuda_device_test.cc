// CudaDevice on a real GPU: allocation and tracking per tier, H2D/D2H round trips, events
// across streams, OOM messages. Without a GPU (or driver) every GPU test skips with the reason;
// the one that checks the no-GPU path runs instead.
#include "runtime/device/cuda_device.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace zs {
namespace {

#define ZS_REQUIRE_GPU()                                                                    \
  do {                                                                                      \
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device or driver on this machine"; \
  } while (0)

std::unique_ptr<CudaDevice> MakeDevice(MemoryTracker& tracker) {
  auto d = CudaDevice::Create(0, tracker);
  ZS_CHECK(d.ok(), "{}", d.status().ToString());
  return std::move(d).value();
}

TEST(CudaDeviceTest, WithoutAGpuCreateIsUnavailable) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  MemoryTracker tracker;
  auto d = CudaDevice::Create(0, tracker);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(d.status().message().find("cuda:0 is unavailable"), std::string::npos)
      << d.status().ToString();
}

TEST(CudaDeviceTest, OrdinalOutOfRangeIsUnavailable) {
  ZS_REQUIRE_GPU();
  MemoryTracker tracker;
  auto d = CudaDevice::Create(CudaDeviceCount(), tracker);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(d.status().message().find("CUDA device(s)"), std::string::npos)
      << d.status().ToString();
}

TEST(CudaDeviceTest, RoundTripHostToDeviceToHostIsTracked) {
  ZS_REQUIRE_GPU();
  MemoryTracker tracker;
  auto dev = MakeDevice(tracker);
  EXPECT_EQ(dev->name(), "cuda:0");
  EXPECT_EQ(dev->kind(), DeviceKind::kCuda);
  constexpr size_t kCount = (8 << 20) / sizeof(float) + 3;
  constexpr size_t kBytes = kCount * sizeof(float);
  {
    auto pinned = dev->Allocate(kBytes, MemoryTier::kPinnedHost, MemoryCategory::kCommBuffers);
    auto d1 = dev->Allocate(kBytes, MemoryTier::kDevice, MemoryCategory::kParameters);
    auto d2 = dev->Allocate(kBytes, MemoryTier::kDevice, MemoryCategory::kGradients);
    auto host = dev->Allocate(kBytes, MemoryTier::kHost, MemoryCategory::kOther);
    ASSERT_TRUE(pinned.ok() && d1.ok() && d2.ok() && host.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pinned->data()) % kHostAlignment, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(host->data()) % kHostAlignment, 0u);
    EXPECT_EQ(tracker.TierCurrent(MemoryTier::kDevice), int64_t(2 * kBytes));
    EXPECT_EQ(tracker.Current(MemoryTier::kPinnedHost, MemoryCategory::kCommBuffers),
              int64_t(kBytes));

    float* p = pinned->data_as<float>();
    for (size_t i = 0; i < kCount; ++i) p[i] = float(i % 1000) - 500.0f;
    auto stream = dev->CreateStream();
    ASSERT_TRUE(stream.ok());
    ASSERT_TRUE(dev->CopyAsync(d1->data(), p, kBytes, **stream).ok());             // H2D
    ASSERT_TRUE(dev->CopyAsync(d2->data(), d1->data(), kBytes, **stream).ok());    // D2D
    ASSERT_TRUE(dev->CopyAsync(host->data(), d2->data(), kBytes, **stream).ok());  // D2H
    ASSERT_TRUE(dev->SynchronizeStream(**stream).ok());
    EXPECT_EQ(std::memcmp(host->data(), p, kBytes), 0);
  }
  EXPECT_EQ(tracker.Snapshot().total_current, 0);
  EXPECT_EQ(tracker.TierPeak(MemoryTier::kDevice), int64_t(2 * kBytes));
}

TEST(CudaDeviceTest, EventOrdersTwoStreams) {
  ZS_REQUIRE_GPU();
  MemoryTracker tracker;
  auto dev = MakeDevice(tracker);
  constexpr size_t kBytes = 32 << 20;
  auto src =
      std::move(dev->Allocate(kBytes, MemoryTier::kPinnedHost, MemoryCategory::kOther)).value();
  auto x = std::move(dev->Allocate(kBytes, MemoryTier::kDevice, MemoryCategory::kOther)).value();
  auto out =
      std::move(dev->Allocate(kBytes, MemoryTier::kPinnedHost, MemoryCategory::kOther)).value();
  std::memset(src.data(), 0x42, kBytes);
  std::memset(out.data(), 0, kBytes);
  auto a = std::move(dev->CreateStream()).value();
  auto b = std::move(dev->CreateStream()).value();
  auto event = std::move(dev->CreateEvent()).value();
  ASSERT_TRUE(dev->MemsetAsync(x.data(), 0, kBytes, *a).ok());
  ASSERT_TRUE(dev->CopyAsync(x.data(), src.data(), kBytes, *a).ok());
  ASSERT_TRUE(dev->RecordEvent(*event, *a).ok());
  ASSERT_TRUE(dev->StreamWaitEvent(*b, *event).ok());
  ASSERT_TRUE(dev->CopyAsync(out.data(), x.data(), kBytes, *b).ok());
  ASSERT_TRUE(dev->SynchronizeStream(*b).ok());
  EXPECT_TRUE(*dev->QueryEvent(*event));
  const auto* o = out.data_as<uint8_t>();
  for (size_t i = 0; i < kBytes; i += 4099) ASSERT_EQ(o[i], 0x42) << i;
}

TEST(CudaDeviceTest, OutOfMemoryNamesTheRequestAndLeavesTheDeviceUsable) {
  ZS_REQUIRE_GPU();
  MemoryTracker tracker;
  auto dev = MakeDevice(tracker);
  auto keep = dev->Allocate(1 << 20, MemoryTier::kDevice, MemoryCategory::kParameters);
  ASSERT_TRUE(keep.ok());
  auto huge = dev->Allocate(size_t{1} << 50, MemoryTier::kDevice, MemoryCategory::kGradients);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kOutOfMemory) << huge.status().ToString();
  const std::string m = huge.status().message();
  for (const char* part : {"out of device memory", "for gradients", "cuda:0", "cudaMalloc",
                           "device in use 1.0 MiB (parameters 1.0 MiB)"}) {
    EXPECT_NE(m.find(part), std::string::npos) << part << " missing in: " << m;
  }
  EXPECT_EQ(tracker.TierCurrent(MemoryTier::kDevice), 1 << 20);
  auto after = dev->Allocate(1 << 20, MemoryTier::kDevice, MemoryCategory::kGradients);
  EXPECT_TRUE(after.ok()) << after.status().ToString();
}

}  // namespace
}  // namespace zs
