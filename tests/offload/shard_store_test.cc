// ShardStore (residency of shard arrays in every tier), PinnedBufferPool (the memlock check) and
// TileCopyPipeline (device<->host copies around a host step), on a CpuDevice.
#include "offload/shard_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>

#include "offload/pinned_buffer_pool.h"
#include "offload/tile_copy_pipeline.h"
#include "runtime/device/cpu_device.h"
#include "tests/offload/scoped_limits.h"

namespace zs {
namespace {

using testing::HasSubstr;
using testing_support::MemlockLimit;
namespace fs = std::filesystem;

class ShardStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           fmt::format("zs_shard_store_{}_{}", getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Slots of three arrays each, sizes that are not multiples of a page.
  static std::vector<SlotShape> Shapes(int n) {
    std::vector<SlotShape> shapes;
    for (int i = 0; i < n; ++i) {
      shapes.push_back({fmt::format("slot {}", i), {4000 + 100 * i, 0, 9000 + 7 * i}});
    }
    return shapes;
  }
  ShardStoreOptions Nvme(int64_t buffers, bool pipeline) const {
    ShardStoreOptions o;
    o.tier = MemoryTier::kNvme;
    o.what = "test arrays";
    o.nvme.dir = dir_.string();
    o.nvme.name = "test";
    o.nvme.block_size = 8192;
    o.buffer_count = buffers;
    o.pipeline_read = o.pipeline_write = pipeline;
    return o;
  }
  // Fills (overwrite) or checks (read) every array of every slot with a pass-specific pattern,
  // acquiring in slot order.
  static void Pass(ShardStore& store, int pass, bool overwrite) {
    for (int slot = 0; slot < store.num_slots(); ++slot) {
      auto view = store.Acquire(
          slot, overwrite ? ShardStore::Access::kOverwrite : ShardStore::Access::kRead);
      ASSERT_TRUE(view.ok()) << view.status().ToString();
      const SlotShape& shape = store.shape(slot);
      for (size_t a = 0; a < shape.array_bytes.size(); ++a) {
        char* p = view->arrays[a];
        if (shape.array_bytes[a] == 0) {
          EXPECT_EQ(p, nullptr);
          continue;
        }
        for (int64_t i = 0; i < shape.array_bytes[a]; ++i) {
          const char want = char(pass * 31 + slot * 7 + int(a) * 3 + int(i % 251));
          if (overwrite) {
            p[i] = want;
          } else if (p[i] != char(want)) {
            ADD_FAILURE() << "slot " << slot << " array " << a << " byte " << i << " pass " << pass;
            return;
          }
        }
      }
      ASSERT_TRUE(store.Release(slot, /*dirty=*/overwrite).ok());
    }
    store.EndPass();
  }

  fs::path dir_;
  MemoryTracker tracker_;
  CpuDevice device_{tracker_};
};

TEST_F(ShardStoreTest, NvmeSlotsRoundTripWithEveryBufferCount) {
  for (int64_t buffers : {2, 3, 5, 16}) {
    for (bool pipeline : {false, true}) {
      SCOPED_TRACE(fmt::format("{} buffers, pipeline {}", buffers, pipeline));
      auto store = ShardStore::Create(Nvme(buffers, pipeline), Shapes(7), device_);
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      EXPECT_EQ(tracker_.Current(MemoryTier::kNvme, MemoryCategory::kOptimizerStates),
                (*store)->total_bytes());
      EXPECT_EQ((*store)->total_bytes() % 4096, 0);
      for (int pass = 0; pass < 4; ++pass) {
        Pass(**store, pass, /*overwrite=*/true);   // write pass k
        Pass(**store, pass, /*overwrite=*/false);  // read it back
      }
      const ShardStoreStats& st = (*store)->stats();
      EXPECT_GT(st.bytes_written, 0);
      if (buffers >= 7) {
        EXPECT_EQ(st.bytes_read, 0) << "every slot stays in a buffer: nothing is read back";
      } else if (pipeline && buffers >= 3) {
        EXPECT_GT(st.prefetch_hits, 0);
      }
      if (!pipeline) {
        EXPECT_EQ(st.prefetch_hits, 0);
      }
      ASSERT_TRUE((*store)->Flush().ok());
      for (int s = 0; s < 7; ++s) {
        EXPECT_NE((*store)->residency(s), SlotResidency::kWritingBack);
        EXPECT_NE((*store)->residency(s), SlotResidency::kFetching);
      }
      store->reset();
      EXPECT_EQ(tracker_.Current(MemoryTier::kNvme, MemoryCategory::kOptimizerStates), 0);
      EXPECT_TRUE(fs::is_empty(dir_)) << "the swap file is removed";
    }
  }
}

TEST_F(ShardStoreTest, MemoryTiersAreAlwaysResident) {
  for (MemoryTier tier : {MemoryTier::kDevice, MemoryTier::kHost, MemoryTier::kPinnedHost}) {
    ShardStoreOptions o;
    o.tier = tier;
    auto store = ShardStore::Create(o, Shapes(3), device_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_GT(tracker_.Current(tier, MemoryCategory::kOptimizerStates), 0);
    Pass(**store, 1, true);
    Pass(**store, 1, false);
    for (int s = 0; s < 3; ++s) EXPECT_EQ((*store)->residency(s), SlotResidency::kResident);
    EXPECT_EQ((*store)->stats().bytes_read, 0);
    EXPECT_EQ((*store)->path(), "");
  }
}

TEST_F(ShardStoreTest, PrefetchFollowsTheRecordedOrderAndSurvivesAnotherOrder) {
  auto store = ShardStore::Create(Nvme(4, true), Shapes(6), device_);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Pass(**store, 0, true);
  Pass(**store, 0, false);  // replays the recorded order: reads run ahead
  const int64_t hits = (*store)->stats().prefetch_hits;
  EXPECT_GE(hits, 3);
  // Another order: predictions go wrong, the data stays right.
  for (int slot : {5, 0, 3, 1, 4, 2}) {
    auto view = (*store)->Acquire(slot);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_EQ(view->arrays[0][5], char(slot * 7 + 5));
    ASSERT_TRUE((*store)->Release(slot, false).ok());
  }
  (*store)->EndPass();
  Pass(**store, 0, false);
}

TEST_F(ShardStoreTest, ACorruptedPageBreaksTheStoreNamingFileSlotAndOffset) {
  auto store = ShardStore::Create(Nvme(2, false), Shapes(4), device_);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Pass(**store, 0, true);
  ASSERT_TRUE((*store)->Flush().ok());
  // Slot 2 starts after slots 0 and 1 (each 4 pages here: 4 KiB + 12 KiB rounded).
  const int64_t offset = (*store)->slot_bytes(0) + (*store)->slot_bytes(1);
  FILE* f = std::fopen((*store)->path().c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, long(offset + 4096), SEEK_SET);
  std::fputc('!', f);
  std::fclose(f);
  Status failed;
  for (int slot = 0; slot < 4 && failed.ok(); ++slot) {
    auto view = (*store)->Acquire(slot);
    if (!view.ok()) {
      failed = view.status();
      break;
    }
    ASSERT_TRUE((*store)->Release(slot, false).ok());
  }
  EXPECT_EQ(failed.code(), StatusCode::kIoError) << failed.ToString();
  EXPECT_THAT(failed.message(), HasSubstr((*store)->path()));
  EXPECT_THAT(failed.message(), HasSubstr("slot 2"));
  EXPECT_THAT(failed.message(), HasSubstr(fmt::format("offset {}", offset + 4096)));
  auto again = (*store)->Acquire(0);
  EXPECT_EQ(again.status().code(), StatusCode::kAborted);
  EXPECT_THAT(again.status().message(), HasSubstr("failed earlier"));
}

// The staging buffers fail after the swap file was made (pinned beyond the memlock limit): a
// clear error, the file removed, the tracker back to zero.
TEST_F(ShardStoreTest, StagingBuffersBeyondTheMemlockLimitFailCleanly) {
  ShardStoreOptions o = Nvme(4, true);
  o.pin = PinMode::kPinned;
  auto store = [&] {
    MemlockLimit limit(16 * 1024);
    return ShardStore::Create(o, Shapes(3), device_);
  }();
  EXPECT_EQ(store.status().code(), StatusCode::kOutOfMemory) << store.status().ToString();
  EXPECT_THAT(store.status().message(), HasSubstr("NVMe staging buffers"));
  EXPECT_EQ(tracker_.Current(MemoryTier::kNvme, MemoryCategory::kOptimizerStates), 0);
  EXPECT_TRUE(fs::is_empty(dir_));
  // With the fallback the same store is made of pageable buffers.
  o.pin = PinMode::kPinnedOrPageable;
  auto fallback = [&] {
    MemlockLimit limit(16 * 1024);
    return ShardStore::Create(o, Shapes(3), device_);
  }();
  ASSERT_TRUE(fallback.ok()) << fallback.status().ToString();
  Pass(**fallback, 0, true);
  Pass(**fallback, 0, false);
}

TEST_F(ShardStoreTest, BufferCountBelowTwoIsRefused) {
  auto store = ShardStore::Create(Nvme(1, true), Shapes(2), device_);
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(store.status().message(), HasSubstr("buffer_count 1"));
}

TEST_F(ShardStoreTest, PinnedPoolChecksTheMemlockLimit) {
  std::optional<MemlockLimit> limit(std::in_place, 256 * 1024);
  auto small = PinnedBufferPool::Create(device_, 4, 16 * 1024, PinMode::kPinned,
                                        MemoryCategory::kCommBuffers, "small buffers");
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_EQ(PinnedBytesInProcess(), 64u * 1024);
  EXPECT_EQ(tracker_.Current(MemoryTier::kPinnedHost, MemoryCategory::kCommBuffers), 64 * 1024);
  // The limit counts what the process already pins.
  auto big = PinnedBufferPool::Create(device_, 4, 64 * 1024, PinMode::kPinned,
                                      MemoryCategory::kCommBuffers, "big buffers");
  limit.reset();
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(big.status().message(), HasSubstr("big buffers"));
  EXPECT_THAT(big.status().message(), HasSubstr("256.0 KiB"));      // the limit
  EXPECT_THAT(big.status().message(), HasSubstr("256.0 KiB for"));  // the bytes asked for
  EXPECT_THAT(big.status().message(), HasSubstr("already pins 64.0 KiB"));
  EXPECT_THAT(big.status().message(), HasSubstr("ulimit -l"));
  small->reset();
  EXPECT_EQ(PinnedBytesInProcess(), 0u);
  // Unpinned pools are not limited.
  auto pageable = PinnedBufferPool::Create(device_, 2, 1 << 20, PinMode::kPageable,
                                           MemoryCategory::kCommBuffers, "pageable");
  ASSERT_TRUE(pageable.ok());
  EXPECT_FALSE((*pageable)->pinned());
  auto i = (*pageable)->Take();
  auto j = (*pageable)->Take();
  ASSERT_TRUE(i && j);
  EXPECT_FALSE((*pageable)->Take().has_value());
  (*pageable)->Give(*i);
  EXPECT_EQ((*pageable)->free_count(), 1);
}

TEST_F(ShardStoreTest, TileCopiesMoveEveryByteAndCountThem) {
  constexpr int kTiles = 5;
  constexpr int64_t kBytes = 10'000;
  auto device_grads =
      device_.Allocate(kTiles * kBytes, MemoryTier::kDevice, MemoryCategory::kGradients);
  auto device_params =
      device_.Allocate(kTiles * kBytes, MemoryTier::kDevice, MemoryCategory::kParameters);
  ASSERT_TRUE(device_grads.ok() && device_params.ok());
  char* g = device_grads->data_as<char>();
  for (int64_t i = 0; i < kTiles * kBytes; ++i) g[i] = char(i * 13);
  auto pipeline = TileCopyPipeline::Create(device_, kBytes, PinMode::kPageable);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status().ToString();
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<TileCopy> tiles;
    for (int t = 0; t < kTiles; ++t) {
      tiles.push_back({g + t * kBytes, kBytes, true, device_params->data_as<char>() + t * kBytes,
                       kBytes, true});
    }
    ASSERT_TRUE((*pipeline)->Begin(tiles).ok());
    for (int t = 0; t < kTiles; ++t) {
      auto view = (*pipeline)->Acquire(t);
      ASSERT_TRUE(view.ok());
      ASSERT_NE(view->grad, g + t * kBytes) << "a device gradient is read from host staging";
      const char* hg = static_cast<const char*>(view->grad);
      char* out = static_cast<char*>(view->param_out);
      for (int64_t i = 0; i < kBytes; ++i) out[i] = char(hg[i] + pass + 1);
      ASSERT_TRUE((*pipeline)->Release(t).ok());
    }
    ASSERT_TRUE((*pipeline)->Finish().ok());
    const char* p = device_params->data_as<const char>();
    for (int64_t i = 0; i < kTiles * kBytes; ++i) {
      ASSERT_EQ(p[i], char(char(i * 13) + pass + 1)) << "byte " << i << " pass " << pass;
    }
  }
  EXPECT_EQ((*pipeline)->stats().device_to_host_bytes, 2 * kTiles * kBytes);
  EXPECT_EQ((*pipeline)->stats().host_to_device_bytes, 2 * kTiles * kBytes);
  // Host-resident arrays are used in place: nothing is copied.
  auto direct = TileCopyPipeline::Create(device_, 0, PinMode::kPageable);
  ASSERT_TRUE(direct.ok());
  ASSERT_TRUE((*direct)->Begin({{g, kBytes, false, g, kBytes, false}}).ok());
  auto view = (*direct)->Acquire(0);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->grad, g);
  ASSERT_TRUE((*direct)->Release(0).ok());
  ASSERT_TRUE((*direct)->Finish().ok());
  EXPECT_EQ((*direct)->stats().device_to_host_bytes, 0);
}

}  // namespace
}  // namespace zs
