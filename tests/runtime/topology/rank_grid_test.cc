#include "runtime/topology/rank_grid.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace zs {
namespace {

TEST(RankGridTest, MegatronExampleOf16Ranks) {
  // Megatron-Core's documented example: 16 GPUs, tp=2, pp=4 (so dp=2).
  RankGrid grid = RankGrid::Create(2, 4, 2, 16).value();
  EXPECT_EQ(grid.GroupRanks(GridAxis::kTp, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(grid.GroupRanks(GridAxis::kTp, 3), (std::vector<int>{2, 3}));
  EXPECT_EQ(grid.GroupRanks(GridAxis::kDp, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(grid.GroupRanks(GridAxis::kDp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(grid.GroupRanks(GridAxis::kPp, 0), (std::vector<int>{0, 4, 8, 12}));
  EXPECT_EQ(grid.GroupRanks(GridAxis::kPp, 13), (std::vector<int>{1, 5, 9, 13}));
  EXPECT_EQ(grid.Coord(13), (GridCoord{.tp = 1, .pp = 3, .dp = 0}));
  EXPECT_EQ(grid.Coord(6), (GridCoord{.tp = 0, .pp = 1, .dp = 1}));
}

TEST(RankGridTest, TwoByTwoByTwo) {
  RankGrid grid = RankGrid::Create(2, 2, 2).value();
  EXPECT_EQ(grid.world_size(), 8);
  EXPECT_EQ(grid.Coord(5), (GridCoord{.tp = 1, .pp = 1, .dp = 0}));
  EXPECT_EQ(grid.GroupRanks(GridAxis::kTp, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(grid.GroupRanks(GridAxis::kDp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(grid.GroupRanks(GridAxis::kPp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(grid.ToString(), "tp=2 x pp=2 x dp=2 (order: tp fastest, then dp, then pp)");
}

// Every grid up to 4 x 4 x 4 against the definitions, computed the slow way.
TEST(RankGridTest, ExhaustiveSmallGrids) {
  for (int tp = 1; tp <= 4; ++tp) {
    for (int pp = 1; pp <= 4; ++pp) {
      for (int dp = 1; dp <= 4; ++dp) {
        SCOPED_TRACE(testing::Message() << "tp=" << tp << " pp=" << pp << " dp=" << dp);
        RankGrid grid = RankGrid::Create(tp, pp, dp, tp * pp * dp).value();
        ASSERT_EQ(grid.world_size(), tp * pp * dp);
        // Reference layout: enumerate pp slowest, then dp, then tp fastest.
        int expected_rank = 0;
        for (int p = 0; p < pp; ++p) {
          for (int d = 0; d < dp; ++d) {
            for (int t = 0; t < tp; ++t, ++expected_rank) {
              const GridCoord c{.tp = t, .pp = p, .dp = d};
              ASSERT_EQ(grid.RankOf(c), expected_rank);
              ASSERT_EQ(grid.Coord(expected_rank), c);
            }
          }
        }
        for (GridAxis axis : kGridAxes) {
          std::set<int> seen_ranks;
          std::set<int> seen_groups;
          for (int rank = 0; rank < grid.world_size(); ++rank) {
            const GridCoord c = grid.Coord(rank);
            const std::vector<int> group = grid.GroupRanks(axis, rank);
            ASSERT_EQ(int(group.size()), grid.size(axis));
            // Members differ from `rank` only along `axis`, ordered by their index on it.
            for (int i = 0; i < int(group.size()); ++i) {
              GridCoord m = grid.Coord(group[size_t(i)]);
              ASSERT_EQ(m.index(axis), i);
              for (GridAxis other : kGridAxes) {
                if (other != axis) {
                  ASSERT_EQ(m.index(other), c.index(other));
                }
              }
              // Everyone in the group names the same group.
              ASSERT_EQ(grid.GroupRanks(axis, group[size_t(i)]), group);
              ASSERT_EQ(grid.GroupIndex(axis, group[size_t(i)]), grid.GroupIndex(axis, rank));
            }
            ASSERT_EQ(group[size_t(c.index(axis))], rank);
            const int index = grid.GroupIndex(axis, rank);
            ASSERT_GE(index, 0);
            ASSERT_LT(index, grid.world_size() / grid.size(axis));
            if (seen_groups.insert(index).second) {
              // A new group: its ranks were not in any earlier group (a partition).
              for (int member : group) ASSERT_TRUE(seen_ranks.insert(member).second);
            }
          }
          EXPECT_EQ(int(seen_ranks.size()), grid.world_size());
          EXPECT_EQ(int(seen_groups.size()), grid.world_size() / grid.size(axis));
        }
        // Model-parallel groups: the tp x pp ranks of one dp index, tp fastest; a partition.
        std::set<int> mp_seen;
        for (int rank = 0; rank < grid.world_size(); ++rank) {
          const GridCoord c = grid.Coord(rank);
          const std::vector<int> group = grid.ModelParallelRanks(rank);
          ASSERT_EQ(int(group.size()), tp * pp);
          ASSERT_EQ(group[size_t(grid.ModelParallelIndex(rank))], rank);
          for (int i = 0; i < int(group.size()); ++i) {
            const GridCoord m = grid.Coord(group[size_t(i)]);
            ASSERT_EQ(m.dp, c.dp);
            ASSERT_EQ(m.tp + tp * m.pp, i);
          }
          if (c.tp == 0 && c.pp == 0) {
            for (int member : group) ASSERT_TRUE(mp_seen.insert(member).second);
          }
        }
        EXPECT_EQ(int(mp_seen.size()), grid.world_size());
      }
    }
  }
}

TEST(RankGridTest, WorldSizeMismatchNamesTheSizes) {
  auto grid = RankGrid::Create(3, 2, 1, 8);
  ASSERT_FALSE(grid.ok());
  EXPECT_EQ(grid.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(grid.status().message(), "tp=3 x pp=2 x dp=1 = 6 does not equal world size 8");
}

TEST(RankGridTest, NonPositiveSizesAreErrors) {
  auto a = RankGrid::Create(2, 0, 2);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("pp=0 must be at least 1"), std::string::npos)
      << a.status().message();
  auto b = RankGrid::Create(-1, 1, 1, 1);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("tp=-1"), std::string::npos) << b.status().message();
  auto c = RankGrid::Create(1 << 16, 1 << 16, 2);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("ranks is more than"), std::string::npos);
}

TEST(RankGridTest, OutOfRangeRankIsAProgrammerError) {
  RankGrid grid = RankGrid::Create(2, 1, 2).value();
  EXPECT_DEATH(grid.Coord(4), "rank 4 is outside");
  EXPECT_DEATH(grid.RankOf(GridCoord{.tp = 2, .pp = 0, .dp = 0}), "outside");
}

}  // namespace
}  // namespace zs
