// One suite every device passes: cpu, budgeted-cpu and (where built and a GPU is present) cuda.
// Only host-tier memory is touched by the host; device memory is checked by copying it back.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <vector>

#include "runtime/device/device.h"
#include "runtime/device/device_factory.h"

namespace zs {
namespace {

constexpr MemoryTier kTiers[] = {MemoryTier::kDevice, MemoryTier::kPinnedHost, MemoryTier::kHost};

class DeviceConformanceTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    auto device = CreateDevice(GetParam(), tracker_);
    if (!device.ok() && device.status().code() == StatusCode::kUnavailable) {
      GTEST_SKIP() << device.status().ToString();
    }
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    device_ = std::move(device).value();
  }

  DeviceBuffer Alloc(size_t bytes, MemoryTier tier,
                     MemoryCategory category = MemoryCategory::kOther) {
    auto b = device_->Allocate(bytes, tier, category);
    ZS_CHECK(b.ok(), "{}", b.status().ToString());
    return std::move(b).value();
  }
  std::unique_ptr<Stream> NewStream() {
    auto s = device_->CreateStream();
    ZS_CHECK(s.ok(), "{}", s.status().ToString());
    return std::move(s).value();
  }
  std::unique_ptr<Event> NewEvent() {
    auto e = device_->CreateEvent();
    ZS_CHECK(e.ok(), "{}", e.status().ToString());
    return std::move(e).value();
  }

  MemoryTracker tracker_;
  std::unique_ptr<Device> device_;
};

TEST_P(DeviceConformanceTest, AllocationsAreCountedAlignedAndFreed) {
  for (MemoryTier tier : kTiers) {
    ASSERT_TRUE(device_->Supports(tier)) << MemoryTierName(tier);
    DeviceBuffer b = Alloc(12345, tier, MemoryCategory::kOptimizerStates);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % device_->Alignment(tier), 0u);
    EXPECT_GE(device_->Alignment(tier),
              tier == MemoryTier::kDevice ? kMinDeviceAlignment : kHostAlignment);
    EXPECT_EQ(tracker_.Current(tier, MemoryCategory::kOptimizerStates), 12345);
  }
  EXPECT_EQ(tracker_.Snapshot().total_current, 0);
  EXPECT_EQ(tracker_.Snapshot().total_peak, 12345);
  EXPECT_EQ(device_->Allocate(8, MemoryTier::kNvme, MemoryCategory::kOther).status().code(),
            StatusCode::kInvalidArgument);
}

// host -> tier A -> tier B -> host for every pair, odd sizes, all on one stream.
TEST_P(DeviceConformanceTest, CopiesRoundTripBetweenEveryPairOfTiers) {
  constexpr size_t kBytes = 100003;
  auto stream = NewStream();
  std::vector<uint8_t> pattern(kBytes);
  for (size_t i = 0; i < kBytes; ++i) pattern[i] = uint8_t(i * 131 + 7);
  DeviceBuffer src = Alloc(kBytes, MemoryTier::kHost);
  DeviceBuffer out = Alloc(kBytes, MemoryTier::kHost);
  std::memcpy(src.data(), pattern.data(), kBytes);
  for (MemoryTier a : kTiers) {
    for (MemoryTier b : kTiers) {
      DeviceBuffer x = Alloc(kBytes, a), y = Alloc(kBytes, b);
      std::memset(out.data(), 0, kBytes);
      ASSERT_TRUE(device_->CopyAsync(x.data(), src.data(), kBytes, *stream).ok());
      ASSERT_TRUE(device_->CopyAsync(y.data(), x.data(), kBytes, *stream).ok());
      ASSERT_TRUE(device_->CopyAsync(out.data(), y.data(), kBytes, *stream).ok());
      ASSERT_TRUE(device_->SynchronizeStream(*stream).ok());
      EXPECT_EQ(std::memcmp(out.data(), pattern.data(), kBytes), 0)
          << MemoryTierName(a) << " -> " << MemoryTierName(b);
    }
  }
}

TEST_P(DeviceConformanceTest, MemsetWorksOnEveryTier) {
  constexpr size_t kBytes = 5000;
  auto stream = NewStream();
  DeviceBuffer out = Alloc(kBytes, MemoryTier::kHost);
  for (MemoryTier tier : kTiers) {
    DeviceBuffer x = Alloc(kBytes, tier);
    ASSERT_TRUE(device_->MemsetAsync(x.data(), 0x11, kBytes, *stream).ok());
    ASSERT_TRUE(device_->MemsetAsync(x.data_as<uint8_t>() + 100, 0xab, 50, *stream).ok());
    ASSERT_TRUE(device_->CopyAsync(out.data(), x.data(), kBytes, *stream).ok());
    ASSERT_TRUE(device_->SynchronizeStream(*stream).ok());
    const auto* o = out.data_as<uint8_t>();
    for (size_t i = 0; i < kBytes; ++i) {
      ASSERT_EQ(o[i], (i >= 100 && i < 150) ? 0xab : 0x11) << MemoryTierName(tier) << " " << i;
    }
  }
}

// A host function runs after the copies before it and before the copies after it.
TEST_P(DeviceConformanceTest, HostFuncsRunInStreamOrder) {
  constexpr size_t kCount = 4096;
  auto stream = NewStream();
  DeviceBuffer host = Alloc(kCount * sizeof(int), MemoryTier::kPinnedHost);
  DeviceBuffer dev = Alloc(kCount * sizeof(int), MemoryTier::kDevice);
  int* h = host.data_as<int>();
  for (size_t i = 0; i < kCount; ++i) h[i] = int(i);
  long sum_seen = -1;
  ASSERT_TRUE(device_->CopyAsync(dev.data(), h, kCount * sizeof(int), *stream).ok());
  ASSERT_TRUE(device_
                  ->LaunchHostFunc(*stream,
                                   [h] {
                                     for (size_t i = 0; i < kCount; ++i)
                                       h[i] = -1;  // after the H2D copy
                                   })
                  .ok());
  ASSERT_TRUE(device_->CopyAsync(h, dev.data(), kCount * sizeof(int), *stream).ok());
  ASSERT_TRUE(device_
                  ->LaunchHostFunc(*stream,
                                   [h, &sum_seen] {
                                     long s = 0;
                                     for (size_t i = 0; i < kCount; ++i) s += h[i];
                                     sum_seen = s;
                                   })
                  .ok());
  ASSERT_TRUE(device_->SynchronizeStream(*stream).ok());
  EXPECT_EQ(sum_seen, long(kCount) * (kCount - 1) / 2);
}

// Stream B waits on A's event: the host is not blocked while A is held at a gate, B's work
// does not run before A's, and B sees A's result.
TEST_P(DeviceConformanceTest, EventsOrderWorkAcrossTwoStreams) {
  constexpr size_t kCount = 1 << 16;
  auto a = NewStream();
  auto b = NewStream();
  auto event = NewEvent();
  DeviceBuffer src = Alloc(kCount * sizeof(float), MemoryTier::kPinnedHost);
  DeviceBuffer x = Alloc(kCount * sizeof(float), MemoryTier::kDevice);
  DeviceBuffer y = Alloc(kCount * sizeof(float), MemoryTier::kDevice);
  DeviceBuffer out = Alloc(kCount * sizeof(float), MemoryTier::kHost);
  float* s = src.data_as<float>();
  for (size_t i = 0; i < kCount; ++i) s[i] = float(i) * 0.5f;
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::atomic<bool> b_ran{false};

  ASSERT_TRUE(device_->LaunchHostFunc(*a, [opened] { opened.wait(); }).ok());
  ASSERT_TRUE(device_->CopyAsync(x.data(), s, kCount * sizeof(float), *a).ok());
  ASSERT_TRUE(device_->RecordEvent(*event, *a).ok());
  ASSERT_TRUE(device_->StreamWaitEvent(*b, *event).ok());  // does not wait for the gate
  ASSERT_TRUE(device_->CopyAsync(y.data(), x.data(), kCount * sizeof(float), *b).ok());
  ASSERT_TRUE(device_->CopyAsync(out.data(), y.data(), kCount * sizeof(float), *b).ok());
  ASSERT_TRUE(device_->LaunchHostFunc(*b, [&b_ran] { b_ran = true; }).ok());

  auto done = device_->QueryEvent(*event);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_FALSE(*done);
  EXPECT_FALSE(b_ran.load());
  gate.set_value();
  ASSERT_TRUE(device_->SynchronizeStream(*b).ok());
  EXPECT_TRUE(b_ran.load());
  EXPECT_TRUE(*device_->QueryEvent(*event));
  const float* o = out.data_as<float>();
  for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(o[i], float(i) * 0.5f) << i;
}

TEST_P(DeviceConformanceTest, SynchronizeEventWaitsForRecordedWork) {
  constexpr size_t kBytes = 1 << 20;
  auto stream = NewStream();
  auto event = NewEvent();
  DeviceBuffer x = Alloc(kBytes, MemoryTier::kDevice);
  DeviceBuffer out = Alloc(kBytes, MemoryTier::kPinnedHost);
  ASSERT_TRUE(device_->MemsetAsync(x.data(), 0x3c, kBytes, *stream).ok());
  ASSERT_TRUE(device_->CopyAsync(out.data(), x.data(), kBytes, *stream).ok());
  ASSERT_TRUE(device_->RecordEvent(*event, *stream).ok());
  ASSERT_TRUE(device_->SynchronizeEvent(*event).ok());
  const auto* o = out.data_as<uint8_t>();
  for (size_t i = 0; i < kBytes; i += 4093) ASSERT_EQ(o[i], 0x3c) << i;
  EXPECT_EQ(o[kBytes - 1], 0x3c);
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceConformanceTest,
                         ::testing::Values("cpu", "budgeted-cpu:64M:64M", "cuda:0"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace zs
