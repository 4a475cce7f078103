// CpuDevice: allocation accounting, stream ordering of many queued copies and host functions,
// events, and the worker-thread model. The cross-device behaviour (round trips through every
// tier, events ordering two streams) is in device_conformance_test.cc, which also runs on cpu.
#include "runtime/device/cpu_device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

namespace zs {
namespace {

constexpr MemoryCategory kParams = MemoryCategory::kParameters;

std::unique_ptr<Stream> NewStream(Device& d) {
  auto s = d.CreateStream();
  ZS_CHECK(s.ok(), "{}", s.status().ToString());
  return std::move(s).value();
}
std::unique_ptr<Event> NewEvent(Device& d) {
  auto e = d.CreateEvent();
  ZS_CHECK(e.ok(), "{}", e.status().ToString());
  return std::move(e).value();
}

TEST(CpuDeviceTest, AllocatesEveryTierAlignedAndCounted) {
  MemoryTracker tracker;
  CpuDevice dev(tracker);
  EXPECT_EQ(dev.name(), "cpu");
  EXPECT_EQ(dev.kind(), DeviceKind::kCpu);
  EXPECT_EQ(&dev.tracker(), &tracker);
  {
    std::vector<DeviceBuffer> buffers;
    for (MemoryTier tier : {MemoryTier::kDevice, MemoryTier::kPinnedHost, MemoryTier::kHost}) {
      ASSERT_TRUE(dev.Supports(tier));
      auto b = dev.Allocate(1000, tier, kParams);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      EXPECT_EQ(b->size(), 1000u);
      EXPECT_EQ(b->tier(), tier);
      EXPECT_EQ(b->category(), kParams);
      EXPECT_EQ(b->device(), &dev);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % dev.Alignment(tier), 0u);
      EXPECT_GE(dev.Alignment(tier), kMinDeviceAlignment);
      std::memset(b->data(), 0x5a, b->size());  // the memory is really there
      EXPECT_EQ(tracker.Current(tier, kParams), 1000);
      buffers.push_back(std::move(b).value());
    }
    EXPECT_EQ(dev.Alignment(MemoryTier::kHost), kHostAlignment);
    EXPECT_EQ(dev.Alignment(MemoryTier::kPinnedHost), kHostAlignment);
    EXPECT_EQ(tracker.Snapshot().total_current, 3000);
  }
  EXPECT_EQ(tracker.Snapshot().total_current, 0);
  EXPECT_EQ(tracker.Snapshot().total_peak, 3000);
}

TEST(CpuDeviceTest, NvmeTierIsRejectedAndNotCounted) {
  MemoryTracker tracker;
  CpuDevice dev(tracker);
  EXPECT_FALSE(dev.Supports(MemoryTier::kNvme));
  auto b = dev.Allocate(64, MemoryTier::kNvme, kParams);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("cpu has no nvme memory"), std::string::npos)
      << b.status().message();
  EXPECT_EQ(tracker.Snapshot().total_peak, 0);
}

TEST(CpuDeviceTest, AbsurdSizeIsOutOfMemory) {
  MemoryTracker tracker;
  CpuDevice dev(tracker);
  auto b = dev.Allocate(size_t{1} << 60, MemoryTier::kDevice, MemoryCategory::kGradients);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(b.status().message().find("gradients"), std::string::npos) << b.status().message();
  EXPECT_EQ(tracker.Snapshot().total_peak, 0);
}

TEST(CpuDeviceTest, ZeroBytesGiveAnEmptyValidBuffer) {
  MemoryTracker tracker;
  CpuDevice dev(tracker);
  auto b = dev.Allocate(0, MemoryTier::kHost, kParams);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(bool(*b));
  EXPECT_EQ(b->data(), nullptr);
  EXPECT_EQ(b->size(), 0u);
}

TEST(CpuDeviceTest, BufferMovesOwnershipAndResetFrees) {
  MemoryTracker tracker;
  CpuDevice dev(tracker);
  DeviceBuffer a = std::move(dev.Allocate(100, MemoryTier::kDevice, kParams)).value();
  void* ptr = a.data();
  DeviceBuffer b(std::move(a));
  EXPECT_FALSE(bool(a));  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(b.data(), ptr);
  DeviceBuffer c = std::move(dev.Allocate(50, MemoryTier::kDevice, kParams)).value();
  EXPECT_EQ(tracker.Current(MemoryTier::kDevice, kParams), 150);
  c = std::move(b);  // frees c's 50 bytes
  EXPECT_EQ(c.data(), ptr);
  EXPECT_EQ(tracker.Current(MemoryTier::kDevice, kParams), 100);
  c.Reset();
  EXPECT_FALSE(bool(c));
  EXPECT_EQ(tracker.Current(MemoryTier::kDevice, kParams), 0);
  c.Reset();  // idempotent
}

// A chain of copies and host functions on one stream: any reordering changes the result.
TEST(CpuDeviceTest, ManyQueuedCopiesAndHostFuncsRunInOrder) {
  MemoryTracker tracker;
  CpuDevice dev(tracker);
  auto stream = NewStream(dev);
  constexpr int kSteps = 200;
  constexpr size_t kBytes = 4096 + 7;
  std::vector<DeviceBuffer> bufs;
  for (int i = 0; i <= kSteps; ++i) {
    bufs.push_back(std::move(dev.Allocate(kBytes, MemoryTier::kDevice, kParams)).value());
  }
  std::vector<uint8_t> expected(kBytes);
  for (size_t j = 0; j < kBytes; ++j) expected[j] = uint8_t(j * 31);
  std::memcpy(bufs[0].data(), expected.data(), kBytes);
  std::vector<int> log;  // touched only by the stream's worker until the final sync

  for (int i = 0; i < kSteps; ++i) {
    ASSERT_TRUE(dev.CopyAsync(bufs[i + 1].data(), bufs[i].data(), kBytes, *stream).ok());
    uint8_t* next = bufs[i + 1].data_as<uint8_t>();
    ASSERT_TRUE(dev.LaunchHostFunc(*stream,
                                   [next, i, &log] {
                                     for (size_t j = 0; j < kBytes; ++j)
                                       next[j] = uint8_t(next[j] * 3 + i);
                                     log.push_back(i);
                                   })
                    .ok());
    if (i % 50 == 49) {
      ASSERT_TRUE(dev.MemsetAsync(next, i & 0xff, 16, *stream).ok());
    }
  }
  ASSERT_TRUE(dev.SynchronizeStream(*stream).ok());

  for (int i = 0; i < kSteps; ++i) {
    for (size_t j = 0; j < kBytes; ++j) expected[j] = uint8_t(expected[j] * 3 + i);
    if (i % 50 == 49) std::memset(expected.data(), i & 0xff, 16);
  }
  EXPECT_EQ(std::memcmp(bufs[kSteps].data(), expected.data(), kBytes), 0);
  ASSERT_EQ(log.size(), size_t(kSteps));
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(log[i], i);
}

TEST(CpuDeviceTest, WorkQueuedFromManyThreadsKeepsEachThreadsOrder) {
  MemoryTracker tracker;
  CpuDevice dev(tracker);
  auto stream = NewStream(dev);
  constexpr int kThreads = 3, kPerThread = 500;
  std::vector<std::pair<int, int>> log;  // appended by the worker only
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        ZS_CHECK(dev.LaunchHostFunc(*stream, [&log, t, i] { log.emplace_back(t, i); }).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(dev.SynchronizeStream(*stream).ok());
  ASSERT_EQ(log.size(), size_t(kThreads * kPerThread));
  std::vector<int> next(kThreads, 0);
  for (auto [t, i] : log) EXPECT_EQ(i, next[t]++);
}

TEST(CpuDeviceTest, CopyIsAsynchronousToTheHost) {
  MemoryTracker tracker;
  CpuDevice dev(tracker);
  auto stream = NewStream(dev);
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  int src = 42, dst = 0;
  ASSERT_TRUE(dev.LaunchHostFunc(*stream, [opened] { opened.wait(); }).ok());
  // Returns while the stream is blocked behind the gate: the host did not run the copy.
  ASSERT_TRUE(dev.CopyAsync(&dst, &src, sizeof(int), *stream).ok());
  auto event = NewEvent(dev);
  ASSERT_TRUE(dev.RecordEvent(*event, *stream).ok());
  EXPECT_FALSE(*dev.QueryEvent(*event));
  gate.set_value();
  ASSERT_TRUE(dev.SynchronizeEvent(*event).ok());
  EXPECT_TRUE(*dev.QueryEvent(*event));
  EXPECT_EQ(dst, 42);
}

TEST(CpuDeviceTest, ReRecordingAnEventMovesItsMark) {
  MemoryTracker tracker;
  CpuDevice dev(tracker);
  auto stream = NewStream(dev);
  auto event = NewEvent(dev);
  EXPECT_TRUE(*dev.QueryEvent(*event));  // never recorded: complete
  ASSERT_TRUE(dev.SynchronizeEvent(*event).ok());
  ASSERT_TRUE(dev.RecordEvent(*event, *stream).ok());  // marks an empty stream
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  ASSERT_TRUE(dev.LaunchHostFunc(*stream, [opened] { opened.wait(); }).ok());
  EXPECT_TRUE(*dev.QueryEvent(*event));  // recorded before the gate
  ASSERT_TRUE(dev.RecordEvent(*event, *stream).ok());
  EXPECT_FALSE(*dev.QueryEvent(*event));  // now behind the gate
  gate.set_value();
  ASSERT_TRUE(dev.SynchronizeEvent(*event).ok());
  EXPECT_TRUE(*dev.QueryEvent(*event));
}

// Stream B waits on an event of stream A: the host is never blocked (it goes on queueing and
// checking while A is held at a gate), B's worker is, and B then sees A's results.
TEST(CpuDeviceTest, StreamWaitEventBlocksTheStreamNotTheHost) {
  MemoryTracker tracker;
  CpuDevice dev(tracker);
  auto a = NewStream(dev);
  auto b = NewStream(dev);
  auto event = NewEvent(dev);
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::vector<int> x(1000, 0), y(1000, -1);
  std::atomic<bool> b_ran{false};

  ASSERT_TRUE(dev.LaunchHostFunc(*a, [opened] { opened.wait(); }).ok());
  ASSERT_TRUE(dev.LaunchHostFunc(*a,
                                 [&x] {
                                   for (size_t i = 0; i < x.size(); ++i) x[i] = int(i) * 7;
                                 })
                  .ok());
  ASSERT_TRUE(dev.RecordEvent(*event, *a).ok());
  std::promise<void> b_reached_wait;  // B's worker is running and about to wait
  std::future<void> b_waiting = b_reached_wait.get_future();
  ASSERT_TRUE(dev.LaunchHostFunc(*b, [&b_reached_wait] { b_reached_wait.set_value(); }).ok());
  ASSERT_TRUE(dev.StreamWaitEvent(*b, *event).ok());  // returns although A is held
  ASSERT_TRUE(dev.CopyAsync(y.data(), x.data(), x.size() * sizeof(int), *b).ok());
  ASSERT_TRUE(dev.LaunchHostFunc(*b, [&b_ran] { b_ran = true; }).ok());

  b_waiting.wait();
  EXPECT_FALSE(*dev.QueryEvent(*event));
  EXPECT_FALSE(b_ran.load());  // B's worker waits for A, which waits for the gate
  gate.set_value();
  ASSERT_TRUE(dev.SynchronizeStream(*b).ok());
  EXPECT_TRUE(b_ran.load());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], int(i) * 7) << i;
}

TEST(CpuDeviceTest, DestroyingAStreamFinishesItsWorkAndEventsOutliveIt) {
  MemoryTracker tracker;
  CpuDevice dev(tracker);
  auto event = NewEvent(dev);
  int count = 0;
  {
    auto stream = NewStream(dev);
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(dev.LaunchHostFunc(*stream, [&] { ++count; }).ok());
    ASSERT_TRUE(dev.RecordEvent(*event, *stream).ok());
  }
  EXPECT_EQ(count, 100);
  EXPECT_TRUE(*dev.QueryEvent(*event));
  ASSERT_TRUE(dev.SynchronizeEvent(*event).ok());
}

TEST(CpuDeviceTest, BadCopyArgumentsAreErrors) {
  MemoryTracker tracker;
  CpuDevice dev(tracker);
  auto stream = NewStream(dev);
  std::vector<char> buf(100);
  Status null_src = dev.CopyAsync(buf.data(), nullptr, 10, *stream);
  EXPECT_EQ(null_src.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(null_src.message().find("CopyAsync on cpu: null pointer"), std::string::npos)
      << null_src.message();
  Status overlap = dev.CopyAsync(buf.data() + 5, buf.data(), 10, *stream);
  EXPECT_EQ(overlap.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(overlap.message().find("overlap"), std::string::npos) << overlap.message();
  EXPECT_EQ(dev.MemsetAsync(nullptr, 0, 10, *stream).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dev.LaunchHostFunc(*stream, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(dev.CopyAsync(nullptr, nullptr, 0, *stream).ok());  // zero bytes: a no-op
}

}  // namespace
}  // namespace zs
