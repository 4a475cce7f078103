// The stage partitioner against brute force over every contiguous partition of small models,
// its tie-break, the virtual-stage mapping and every documented error.
#include "runtime/parallel/pipeline/stage_partition.h"
#include "tests/status_is.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace zs {
namespace {

double RangeCost(const std::vector<double>& costs, ChunkUnits r) {
  double sum = 0;
  for (int u = r.begin; u < r.end; ++u) sum += costs[u];
  return sum;
}

// The smallest largest-stage cost over every way to cut `costs` into `parts` non-empty ranges.
double BruteForceOptimum(const std::vector<double>& costs, int parts) {
  const int n = int(costs.size());
  double best = std::numeric_limits<double>::infinity();
  std::function<void(int, int, double)> go = [&](int begin, int left, double worst) {
    if (left == 1) {
      best = std::min(best, std::max(worst, RangeCost(costs, {begin, n})));
      return;
    }
    for (int end = begin + 1; end <= n - (left - 1); ++end) {
      go(end, left - 1, std::max(worst, RangeCost(costs, {begin, end})));
    }
  };
  go(0, parts, 0);
  return best;
}

void ExpectCovering(const std::vector<ChunkUnits>& ranges, int units) {
  ASSERT_FALSE(ranges.empty());
  EXPECT_EQ(ranges.front().begin, 0);
  EXPECT_EQ(ranges.back().end, units);
  for (size_t i = 0; i < ranges.size(); ++i) {
    EXPECT_GT(ranges[i].size(), 0) << "stage " << i << " is empty";
    if (i > 0) {
      EXPECT_EQ(ranges[i].begin, ranges[i - 1].end) << "stage " << i;
    }
  }
}

TEST(StagePartitionTest, MatchesBruteForceOnRandomModels) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> size(1, 9);
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = size(rng);
    std::vector<double> costs(n);
    // Integers half of the time, so that ties between partitions are common.
    for (double& c : costs) c = trial % 2 ? std::floor(cost(rng)) : cost(rng);
    for (int stages = 1; stages <= n; ++stages) {
      StatusOr<StagePartition> got = PartitionStages(costs, stages);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ExpectCovering(got->chunks, n);
      ASSERT_EQ(got->num_chunks(), stages);
      double worst = 0;
      for (int c = 0; c < stages; ++c) {
        EXPECT_DOUBLE_EQ(got->chunk_costs[c], RangeCost(costs, got->chunks[c]));
        worst = std::max(worst, got->chunk_costs[c]);
      }
      EXPECT_NEAR(worst, BruteForceOptimum(costs, stages), 1e-9)
          << "trial " << trial << ", " << stages << " stages: " << got->ToString();
      EXPECT_DOUBLE_EQ(got->MaxChunkCost(), worst);
    }
  }
}

TEST(StagePartitionTest, TiesGiveTheLaterStagesTheMostUnits) {
  std::vector<double> costs = {3, 3, 3};
  StatusOr<StagePartition> two = PartitionStages(costs, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->chunks, (std::vector<ChunkUnits>{{0, 1}, {1, 3}}));
  // Equal units split evenly; a heavy unit gets a stage of its own.
  std::vector<double> even(8, 1.0);
  StatusOr<StagePartition> four = PartitionStages(even, 4);
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->chunks, (std::vector<ChunkUnits>{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  std::vector<double> heavy = {1, 1, 1, 10, 1, 1};
  StatusOr<StagePartition> three = PartitionStages(heavy, 3);
  ASSERT_TRUE(three.ok());
  EXPECT_DOUBLE_EQ(three->MaxChunkCost(), 10);
  EXPECT_EQ(three->chunks[1], (ChunkUnits{3, 4}));
}

TEST(StagePartitionTest, ZeroCostsAreValid) {
  std::vector<double> zeros(5, 0.0);
  StatusOr<StagePartition> got = PartitionStages(zeros, 5);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectCovering(got->chunks, 5);
  EXPECT_EQ(got->MaxChunkCost(), 0);
}

TEST(StagePartitionTest, VirtualStagesMapChunksRoundRobin) {
  std::vector<double> costs(12, 1.0);
  StatusOr<StagePartition> got = PartitionVirtualStages(costs, 3, 2);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->ranks, 3);
  EXPECT_EQ(got->virtual_stages, 2);
  ASSERT_EQ(got->num_chunks(), 6);
  ExpectCovering(got->chunks, 12);
  for (int c = 0; c < 6; ++c) {
    EXPECT_EQ(got->chunks[c], (ChunkUnits{2 * c, 2 * c + 2}));
    EXPECT_EQ(got->RankOfChunk(c), c % 3);
    EXPECT_EQ(got->LocalIndexOfChunk(c), c / 3);
  }
  EXPECT_EQ(got->ChunksOfRank(0), (std::vector<int>{0, 3}));
  EXPECT_EQ(got->ChunksOfRank(2), (std::vector<int>{2, 5}));
  EXPECT_NE(got->ToString().find("chunk 4 (rank 1): units [8, 10)"), std::string::npos)
      << got->ToString();
}

TEST(StagePartitionTest, ByParameterCount) {
  ModelSpec model;
  auto unit = [](std::string name, int64_t numel) {
    return UnitSpec{std::move(name), {ParamSpec{.name = "w", .shape = {numel}}}};
  };
  model.units = {unit("embed", 40),   unit("block.0", 10), unit("block.1", 10),
                 unit("block.2", 10), unit("block.3", 10), unit("head", 40)};
  EXPECT_EQ(UnitParamCosts(model), (std::vector<double>{40, 10, 10, 10, 10, 40}));
  StatusOr<StagePartition> got = PartitionStages(model, 3);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->chunks, (std::vector<ChunkUnits>{{0, 1}, {1, 5}, {5, 6}}));
  EXPECT_EQ(got->chunk_costs, (std::vector<double>{40, 40, 40}));

  ModelSpec empty;
  EXPECT_EQ(PartitionStages(empty, 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(StagePartitionTest, ErrorsNameTheNumbers) {
  std::vector<double> costs = {1, 2, 3};
  EXPECT_TRUE(StatusIs(PartitionStages(costs, 4).status(), StatusCode::kInvalidArgument,
                       {"3 units", "4 stages", "more stages than units"}));
  EXPECT_TRUE(StatusIs(PartitionStages(costs, 0).status(), StatusCode::kInvalidArgument,
                       {"3 units", "0 stages"}));
  EXPECT_TRUE(
      StatusIs(PartitionStages(costs, -2).status(), StatusCode::kInvalidArgument, {"-2 stages"}));
  EXPECT_TRUE(StatusIs(PartitionVirtualStages(costs, 2, 2).status(), StatusCode::kInvalidArgument,
                       {"3 units", "2 pp ranks x 2 virtual stages = 4 chunks"}));
  EXPECT_TRUE(StatusIs(PartitionVirtualStages(costs, 1, 0).status(), StatusCode::kInvalidArgument,
                       {"0 virtual stages"}));
  std::vector<double> negative = {1, -0.5, 3};
  EXPECT_TRUE(StatusIs(PartitionStages(negative, 2).status(), StatusCode::kInvalidArgument,
                       {"unit 1", "-0.5"}));
  std::vector<double> nan = {1, std::nan(""), 3};
  EXPECT_TRUE(
      StatusIs(PartitionStages(nan, 2).status(), StatusCode::kInvalidArgument, {"unit 1", "nan"}));
  std::vector<double> none;
  EXPECT_TRUE(
      StatusIs(PartitionStages(none, 1).status(), StatusCode::kInvalidArgument, {"0 units"}));
}

}  // namespace
}  // namespace zs
