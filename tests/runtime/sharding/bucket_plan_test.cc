#include "runtime/sharding/bucket_plan.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "tests/runtime/sharding/layout_cases.h"

namespace zs {
namespace {

// Checks every property of one plan against a simple element-by-element reference.
void CheckPlan(const ShardLayout& l, int64_t bucket_size) {
  SCOPED_TRACE(fmt::format("world={} align={} unit={} bucket_size={}", l.world_size(),
                           l.alignment(), l.unit_size(), bucket_size));
  StatusOr<BucketPlan> made = BucketPlan::Create(l, bucket_size);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const BucketPlan& plan = *made;
  const int world = l.world_size();
  const int64_t granule = world * l.alignment();
  const int64_t cap = std::max(granule, bucket_size / granule * granule);

  std::vector<int> covered(l.padded_size(), 0);
  int64_t next_end = l.shard_size();  // buckets walk the shards from the tail down
  for (int b = 0; b < plan.num_buckets(); ++b) {
    ShardRange column = plan.ShardRangeOf(b);
    EXPECT_EQ(column.end, ShardOffset(next_end)) << "bucket " << b;
    next_end = column.begin.value();
    ASSERT_FALSE(column.empty());
    EXPECT_EQ(column.size() % l.alignment(), 0);
    EXPECT_EQ(plan.BucketSize(b), column.size() * world);
    EXPECT_LE(plan.BucketSize(b), cap);
    if (b + 1 < plan.num_buckets()) {
      EXPECT_EQ(plan.BucketSize(b), cap);  // only the last bucket may be narrower
    }

    // Even split: rank r's slice is the r-th equal part of the buffer and lands in its shard.
    std::vector<int> params;
    for (int r = 0; r < world; ++r) {
      BucketRange slice = plan.SliceOf(b, r);
      EXPECT_EQ(slice.begin, BucketOffset(r * column.size()));
      EXPECT_EQ(slice.size(), plan.BucketSize(b) / world);
      UnitRange piece = plan.UnitRangeOf(b, r);
      EXPECT_EQ(piece.size(), column.size());
      for (int64_t i = 0; i < slice.size(); ++i) {
        UnitOffset u = plan.ToUnit(b, slice.begin + i);
        ASSERT_EQ(u, piece.begin + i);
        EXPECT_EQ(l.ToShard(u), (ShardPosition{r, column.begin + i}));
        EXPECT_EQ(plan.ToBucket(u), (BucketPosition{b, slice.begin + i}));
        ++covered[u.value()];
        for (int p = 0; p < l.num_params(); ++p) {
          if (l.ParamRangeInUnit(p).Contains(u)) params.push_back(p);
        }
      }
    }
    std::sort(params.begin(), params.end());
    params.erase(std::unique(params.begin(), params.end()), params.end());
    EXPECT_EQ(plan.ParamsOf(b), params) << "bucket " << b;
  }
  EXPECT_EQ(next_end, 0);
  // The buckets tile the padded unit: every element exactly once.
  for (int64_t u = 0; u < l.padded_size(); ++u) ASSERT_EQ(covered[u], 1) << "unit element " << u;
}

TEST(BucketPlanTest, ExhaustiveSmallCases) {
  for (const std::vector<int64_t>& sizes : testing::ParamSizeCases()) {
    for (int world = 1; world <= 8; ++world) {
      for (int64_t align : {1, 4, 64}) {
        for (ParamStart start : {ParamStart::kPacked, ParamStart::kAligned}) {
          ShardLayout l = *ShardLayout::Create(sizes, world, align, start);
          const int64_t granule = world * align;
          for (int64_t bucket_size : {int64_t{1}, granule, 2 * granule + 1, 3 * granule,
                                      l.padded_size() + 1, int64_t{INT64_MAX}}) {
            CheckPlan(l, bucket_size);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(BucketPlanTest, HandWorkedExample) {
  // Unit {5, 3, 10} over 4 ranks, alignment 4: shards of 8. Buckets of 16 = 4 per rank.
  ShardLayout l = *ShardLayout::Create(std::vector<int64_t>{5, 3, 10}, 4, 4);
  BucketPlan plan = *BucketPlan::Create(l, 20);  // rounded down to 16
  ASSERT_EQ(plan.num_buckets(), 2);
  EXPECT_EQ(plan.ShardRangeOf(0), (ShardRange{ShardOffset(4), ShardOffset(8)}));
  EXPECT_EQ(plan.ShardRangeOf(1), (ShardRange{ShardOffset(0), ShardOffset(4)}));
  EXPECT_EQ(plan.UnitRangeOf(0, 2), (UnitRange{UnitOffset(20), UnitOffset(24)}));
  EXPECT_EQ(plan.SliceOf(0, 2), (BucketRange{BucketOffset(8), BucketOffset(12)}));
  // Bucket 0 holds unit [4, 8) (params 0 and 1), [12, 16) and [20, 24) (param 2), padding.
  EXPECT_EQ(plan.ParamsOf(0), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(plan.ToBucket(UnitOffset(17)), (BucketPosition{1, BucketOffset(9)}));
  EXPECT_EQ(plan.ToUnit(1, BucketOffset(9)), UnitOffset(17));
}

TEST(BucketPlanTest, EmptyUnitHasNoBuckets) {
  ShardLayout l = *ShardLayout::Create(std::vector<int64_t>{}, 4, 64);
  BucketPlan plan = *BucketPlan::Create(l, 1024);
  EXPECT_EQ(plan.num_buckets(), 0);
}

TEST(BucketPlanTest, ErrorsNameTheValues) {
  ShardLayout l = *ShardLayout::Create(std::vector<int64_t>{7}, 2, 4);
  for (int64_t bad : {int64_t{0}, int64_t{-5}}) {
    StatusOr<BucketPlan> made = BucketPlan::Create(l, bad);
    ASSERT_FALSE(made.ok());
    EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(made.status().message(),
              fmt::format("bucket plan: bucket size {} elements < 1", bad));
  }
}

}  // namespace
}  // namespace zs
