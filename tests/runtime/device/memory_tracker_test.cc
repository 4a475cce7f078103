#include "runtime/device/memory_tracker.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace zs {
namespace {

constexpr MemoryTier kDev = MemoryTier::kDevice;
constexpr MemoryTier kHost = MemoryTier::kHost;
constexpr MemoryCategory kParams = MemoryCategory::kParameters;
constexpr MemoryCategory kGrads = MemoryCategory::kGradients;
constexpr MemoryCategory kOpt = MemoryCategory::kOptimizerStates;

TEST(MemoryTrackerTest, CurrentAndPeakPerCellTierAndTotal) {
  MemoryTracker t(3);
  EXPECT_EQ(t.rank(), 3);
  t.Add(kDev, kParams, 100);
  t.Add(kDev, kGrads, 50);  // device: 150
  t.Sub(kDev, kParams, 100);
  t.Add(kHost, kOpt, 30);
  t.Add(kDev, kGrads, 20);  // device: 70

  EXPECT_EQ(t.Current(kDev, kParams), 0);
  EXPECT_EQ(t.Peak(kDev, kParams), 100);
  EXPECT_EQ(t.Current(kDev, kGrads), 70);
  EXPECT_EQ(t.Peak(kDev, kGrads), 70);
  EXPECT_EQ(t.TierCurrent(kDev), 70);
  EXPECT_EQ(t.TierPeak(kDev), 150);
  EXPECT_EQ(t.TierCurrent(kHost), 30);
  EXPECT_EQ(t.TierPeak(kHost), 30);
  MemorySnapshot s = t.Snapshot();
  EXPECT_EQ(s.total_current, 100);
  EXPECT_EQ(s.total_peak, 150);
  EXPECT_EQ(s.Current(kHost, kOpt), 30);
  EXPECT_EQ(s.TierCurrent(MemoryTier::kPinnedHost), 0);
}

TEST(MemoryTrackerTest, ResetPeaksSetsPeaksToCurrent) {
  MemoryTracker t;
  t.Add(kDev, kParams, 1000);
  t.Add(kHost, kGrads, 10);
  t.Sub(kDev, kParams, 600);
  t.ResetPeaks();
  EXPECT_EQ(t.Peak(kDev, kParams), 400);
  EXPECT_EQ(t.TierPeak(kDev), 400);
  EXPECT_EQ(t.Snapshot().total_peak, 410);
  t.Add(kDev, kParams, 100);
  EXPECT_EQ(t.Peak(kDev, kParams), 500);
  EXPECT_EQ(t.Snapshot().total_peak, 510);
}

TEST(MemoryTrackerTest, InUseSummaryListsNonEmptyCategories) {
  MemoryTracker t;
  t.Add(kDev, kParams, int64_t{512} << 20);
  t.Add(kDev, kOpt, int64_t{468} << 20);
  EXPECT_EQ(t.Snapshot().InUseSummary(kDev),
            "device in use 980.0 MiB (parameters 512.0 MiB, optimizer_states 468.0 MiB)");
  EXPECT_EQ(t.Snapshot().InUseSummary(kHost), "host in use 0 B");
}

TEST(MemoryTrackerTest, FormatBytesPicksUnits) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(int64_t{12} << 20), "12.0 MiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 29), "1.50 GiB");
}

TEST(MemoryTrackerTest, ConcurrentAddSubBalances) {
  MemoryTracker t;
  constexpr int kThreads = 4, kIters = 2000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&t] {
      for (int j = 0; j < kIters; ++j) {
        t.Add(kDev, kGrads, 8);
        t.Sub(kDev, kGrads, 8);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(t.Current(kDev, kGrads), 0);
  EXPECT_GE(t.Peak(kDev, kGrads), 8);
  EXPECT_LE(t.Peak(kDev, kGrads), 8 * kThreads);
}

TEST(MemoryTrackerDeathTest, SubMoreThanRecordedIsABug) {
  MemoryTracker t(2);
  t.Add(kDev, kParams, 5);
  EXPECT_DEATH(t.Sub(kDev, kParams, 10),
               "rank 2: freeing 10 bytes of device/parameters but only 5 are recorded");
}

}  // namespace
}  // namespace zs
