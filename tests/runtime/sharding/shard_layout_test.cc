#include "runtime/sharding/shard_layout.h"

#include <gtest/gtest.h>

#include <fmt/ranges.h>

#include <climits>
#include <vector>

#include "tests/runtime/sharding/layout_cases.h"

namespace zs {
namespace {

std::string Describe(const std::vector<int64_t>& sizes, int world, int64_t align,
                     ParamStart start) {
  return fmt::format("sizes=[{}] world={} align={} aligned_starts={}", fmt::join(sizes, ","),
                     world, align, start == ParamStart::kAligned);
}

// Checks every property of one layout against a simple element-by-element reference.
void CheckLayout(const std::vector<int64_t>& sizes, int world, int64_t align, ParamStart start) {
  SCOPED_TRACE(Describe(sizes, world, align, start));
  StatusOr<ShardLayout> made = ShardLayout::Create(sizes, world, align, start);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const ShardLayout& l = *made;
  ASSERT_EQ(l.num_params(), static_cast<int>(sizes.size()));

  // Reference packing: parameters in order, starts aligned when asked.
  int64_t cursor = 0;
  for (int p = 0; p < l.num_params(); ++p) {
    if (start == ParamStart::kAligned) cursor = (cursor + align - 1) / align * align;
    EXPECT_EQ(l.ParamRangeInUnit(p),
              (UnitRange{UnitOffset(cursor), UnitOffset(cursor + sizes[p])}));
    EXPECT_EQ(l.ParamSize(p), sizes[p]);
    cursor += sizes[p];
  }
  EXPECT_EQ(l.unit_size(), cursor);

  // Equal aligned shards, the smallest that hold the unit; padding only past the unit.
  EXPECT_EQ(l.shard_size() % align, 0);
  EXPECT_EQ(l.padded_size(), l.shard_size() * world);
  EXPECT_GE(l.padded_size(), l.unit_size());
  if (l.shard_size() > 0) {
    EXPECT_LT((l.shard_size() - align) * world, l.unit_size());
  }
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(l.ShardRangeInUnit(r),
              (UnitRange{UnitOffset(r * l.shard_size()), UnitOffset((r + 1) * l.shard_size())}));
  }

  // Every element of every parameter is owned by exactly one rank, once, and the two frames of
  // an OwnedPart name the same elements.
  std::vector<int> owners(l.padded_size(), 0);
  for (int p = 0; p < l.num_params(); ++p) {
    std::vector<int> seen(sizes[p], 0);
    for (int r = 0; r < world; ++r) {
      OwnedPart part = l.OwnedBy(p, r);
      ASSERT_EQ(part.param.size(), part.shard.size());
      if (part.empty()) {
        EXPECT_EQ(part, OwnedPart{});
        continue;
      }
      EXPECT_GE(part.shard.begin, ShardOffset(0));
      EXPECT_LE(part.shard.end, ShardOffset(l.shard_size()));
      for (int64_t i = 0; i < part.param.size(); ++i) {
        ParamOffset po = part.param.begin + i;
        ShardOffset so = part.shard.begin + i;
        UnitOffset u = l.ToUnit(p, po);
        ASSERT_EQ(u, l.ToUnit(so, r));
        EXPECT_EQ(l.ToShard(u), (ShardPosition{r, so}));
        ++seen[po.value()];
        ++owners[u.value()];
      }
    }
    for (int64_t i = 0; i < sizes[p]; ++i) {
      ASSERT_EQ(seen[i], 1) << "parameter " << p << " element " << i;
    }
  }
  // No unit element belongs to two parameters; nothing past the unit belongs to any.
  for (int64_t u = 0; u < l.padded_size(); ++u) {
    ASSERT_LE(owners[u], 1) << "unit element " << u;
    if (u >= l.unit_size()) {
      ASSERT_EQ(owners[u], 0) << "padding element " << u;
    }
    if (start == ParamStart::kPacked && u < l.unit_size()) {
      ASSERT_EQ(owners[u], 1) << "unit element " << u;
    }
  }

  // Unit <-> shard round trip over the whole padded buffer.
  for (int64_t u = 0; u < l.padded_size(); ++u) {
    ShardPosition pos = l.ToShard(UnitOffset(u));
    ASSERT_GE(pos.rank, 0);
    ASSERT_LT(pos.rank, world);
    ASSERT_EQ(l.ToUnit(pos.offset, pos.rank), UnitOffset(u));
  }
}

TEST(ShardLayoutTest, ExhaustiveSmallCases) {
  for (const std::vector<int64_t>& sizes : testing::ParamSizeCases()) {
    for (int world = 1; world <= 8; ++world) {
      for (int64_t align : {1, 4, 64}) {
        for (ParamStart start : {ParamStart::kPacked, ParamStart::kAligned}) {
          CheckLayout(sizes, world, align, start);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(ShardLayoutTest, HandWorkedExample) {
  // Unit of 18 elements over 4 ranks, alignment 4: ceil(18 / 4) = 5 -> shards of 8, padded 32.
  const std::vector<int64_t> sizes = {5, 3, 10};
  ShardLayout l = *ShardLayout::Create(sizes, 4, 4);
  EXPECT_EQ(l.unit_size(), 18);
  EXPECT_EQ(l.shard_size(), 8);
  EXPECT_EQ(l.padded_size(), 32);
  EXPECT_EQ(l.OwnedBy(0, 0), (OwnedPart{{ParamOffset(0), ParamOffset(5)},
                                        {ShardOffset(0), ShardOffset(5)}}));
  EXPECT_EQ(l.OwnedBy(1, 0), (OwnedPart{{ParamOffset(0), ParamOffset(3)},
                                        {ShardOffset(5), ShardOffset(8)}}));
  EXPECT_TRUE(l.OwnedBy(1, 1).empty());
  // Parameter 2 spans ranks 1 and 2; rank 3 holds only padding.
  EXPECT_EQ(l.OwnedBy(2, 1), (OwnedPart{{ParamOffset(0), ParamOffset(8)},
                                        {ShardOffset(0), ShardOffset(8)}}));
  EXPECT_EQ(l.OwnedBy(2, 2), (OwnedPart{{ParamOffset(8), ParamOffset(10)},
                                        {ShardOffset(0), ShardOffset(2)}}));
  for (int p = 0; p < 3; ++p) EXPECT_TRUE(l.OwnedBy(p, 3).empty());
  EXPECT_EQ(l.ToShard(UnitOffset(17)), (ShardPosition{2, ShardOffset(1)}));

  // Aligned starts: parameter 1 moves to 8, parameter 2 to 12; unit 22 -> shards of 8.
  ShardLayout a = *ShardLayout::Create(sizes, 4, 4, ParamStart::kAligned);
  EXPECT_EQ(a.ParamRangeInUnit(1), (UnitRange{UnitOffset(8), UnitOffset(11)}));
  EXPECT_EQ(a.ParamRangeInUnit(2), (UnitRange{UnitOffset(12), UnitOffset(22)}));
  EXPECT_EQ(a.shard_size(), 8);
}

TEST(ShardLayoutTest, EmptyUnitHasEmptyShards) {
  ShardLayout l = *ShardLayout::Create(std::vector<int64_t>{0, 0}, 3, 64);
  EXPECT_EQ(l.unit_size(), 0);
  EXPECT_EQ(l.shard_size(), 0);
  EXPECT_EQ(l.padded_size(), 0);
  EXPECT_TRUE(l.OwnedBy(1, 2).empty());
}

void ExpectInvalid(const StatusOr<ShardLayout>& made, const std::string& message) {
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(made.status().message(), message);
}

TEST(ShardLayoutTest, ErrorsNameTheValues) {
  const std::vector<int64_t> sizes = {3, 4};
  ExpectInvalid(ShardLayout::Create(sizes, 0, 4), "shard layout: world_size 0 < 1");
  ExpectInvalid(ShardLayout::Create(sizes, -2, 4), "shard layout: world_size -2 < 1");
  ExpectInvalid(ShardLayout::Create(sizes, 2, 3),
                "shard layout: alignment 3 is not a power of two");
  ExpectInvalid(ShardLayout::Create(sizes, 2, 0),
                "shard layout: alignment 0 is not a power of two");
  ExpectInvalid(ShardLayout::Create(std::vector<int64_t>{3, -1}, 2, 4),
                "shard layout: parameter 1 has negative size -1");
  ExpectInvalid(ShardLayout::Create(std::vector<int64_t>{5, INT64_MAX}, 1, 1),
                fmt::format("shard layout: parameter 1 of size {} at unit offset 5 overflows int64",
                            INT64_MAX));
  ExpectInvalid(ShardLayout::Create(std::vector<int64_t>{INT64_MAX - 10}, 2, 64),
                fmt::format("shard layout: unit of {} elements padded to 2 ranks x alignment 64 "
                            "overflows int64",
                            INT64_MAX - 10));
  // The largest unit that still fits is accepted.
  EXPECT_TRUE(ShardLayout::Create(std::vector<int64_t>{INT64_MAX}, 1, 1).ok());
}

}  // namespace
}  // namespace zs
