// ProcessGroups over the `local` backend (ranks as threads): every rank's tp/pp/dp
// communicators hold exactly the ranks RankGrid says, in its order, and collectives in each
// group reduce over exactly those ranks.
#include "runtime/comm/process_groups.h"

#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <thread>

#include "runtime/comm/backend_registry.h"
#include "runtime/topology/store.h"

namespace zs {
namespace {

// Runs body(rank) on one thread per rank; returns every rank's Status.
std::vector<Status> OnRanks(int world, const std::function<Status(int)>& body) {
  std::vector<Status> results(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { results[size_t(r)] = body(r); });
  for (auto& t : threads) t.join();
  return results;
}

Status CheckGroup(const RankGrid& grid, int world_rank, GridAxis axis, Communicator& comm) {
  const std::vector<int> expected = grid.GroupRanks(axis, world_rank);
  const std::string where =
      fmt::format("rank {} of {}, group {}", world_rank, grid.ToString(), GridAxisName(axis));
  if (comm.size() != int(expected.size()) || comm.rank() != grid.Coord(world_rank).index(axis) ||
      comm.group_name() != GridAxisName(axis)) {
    return InternalError(fmt::format("{}: got rank {} of {} named '{}'", where, comm.rank(),
                                     comm.size(), comm.group_name()));
  }
  // Membership: gather the world ranks of the group, in group order.
  const float mine = float(world_rank);
  std::vector<float> members(expected.size(), -1.0f);
  ZS_RETURN_IF_ERROR(comm.AllGather(&mine, members.data(), 1, DType::kF32));
  for (size_t i = 0; i < expected.size(); ++i) {
    if (members[i] != float(expected[i])) {
      return InternalError(fmt::format("{}: member {} is world rank {}, expected {}", where, i,
                                       members[i], expected[i]));
    }
  }
  // A reduction over exactly the group: sum of (world rank + 1) and of a per-axis weight.
  const float in[2] = {float(world_rank + 1), float(int(axis) * 100 + world_rank)};
  float out[2] = {0, 0};
  ZS_RETURN_IF_ERROR(comm.AllReduce(in, out, 2, DType::kF32, ReduceOp::kSum));
  float want[2] = {0, 0};
  for (int r : expected) {
    want[0] += float(r + 1);
    want[1] += float(int(axis) * 100 + r);
  }
  if (out[0] != want[0] || out[1] != want[1]) {
    return InternalError(fmt::format("{}: all-reduce gave {} and {}, expected {} and {}", where,
                                     out[0], out[1], want[0], want[1]));
  }
  return OkStatus();
}

void RunGrid(int tp, int pp, int dp) {
  SCOPED_TRACE(fmt::format("tp={} pp={} dp={}", tp, pp, dp));
  RegisterBuiltinBackends();
  Backend* local = FindBackend("local").value();
  const RankGrid grid = RankGrid::Create(tp, pp, dp).value();
  const int world = grid.world_size();
  InProcessStore store;
  CommOptions options;
  options.timeout = std::chrono::milliseconds(60'000);
  std::vector<Status> results = OnRanks(world, [&](int rank) -> Status {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                        local->Connect(store, rank, world, options));
    ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(*comm, grid));
    if (groups.coord() != grid.Coord(rank) || &groups.world() != comm.get()) {
      return InternalError(fmt::format("rank {}: wrong coordinate or world", rank));
    }
    // Use the groups in an interleaved order to show they progress independently of each
    // other and of the world.
    for (GridAxis axis : {GridAxis::kDp, GridAxis::kTp, GridAxis::kPp}) {
      ZS_RETURN_IF_ERROR(CheckGroup(grid, rank, axis, groups.group(axis)));
    }
    ZS_RETURN_IF_ERROR(CheckGroup(grid, rank, GridAxis::kTp, groups.tp()));
    ZS_RETURN_IF_ERROR(CheckGroup(grid, rank, GridAxis::kPp, groups.pp()));
    ZS_RETURN_IF_ERROR(CheckGroup(grid, rank, GridAxis::kDp, groups.dp()));
    // The model-parallel group: the tp x pp ranks of this dp index, tp fastest.
    {
      Communicator& mp = groups.model_parallel();
      const std::vector<int> expected = grid.ModelParallelRanks(rank);
      if (mp.size() != int(expected.size()) || mp.rank() != grid.ModelParallelIndex(rank) ||
          mp.group_name() != "mp") {
        return InternalError(fmt::format("rank {}: mp group rank {} of {} named '{}'", rank,
                                         mp.rank(), mp.size(), mp.group_name()));
      }
      const float mine = float(rank);
      std::vector<float> members(expected.size(), -1.0f);
      ZS_RETURN_IF_ERROR(mp.AllGather(&mine, members.data(), 1, DType::kF32));
      for (size_t i = 0; i < expected.size(); ++i) {
        const GridCoord c = grid.Coord(expected[i]);
        if (members[i] != float(expected[i]) || c.dp != grid.Coord(rank).dp ||
            grid.ModelParallelIndex(expected[i]) != int(i)) {
          return InternalError(fmt::format("rank {}: mp member {} is world rank {}, expected {}",
                                           rank, i, members[i], expected[i]));
        }
      }
    }
    ProcessGroups moved = std::move(groups);
    ZS_RETURN_IF_ERROR(moved.world().Barrier());
    return OkStatus();
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(results[size_t(r)].ok()) << "rank " << r << ": " << results[size_t(r)].ToString();
  }
}

TEST(ProcessGroupsTest, World8Is2x2x2) { RunGrid(2, 2, 2); }
TEST(ProcessGroupsTest, World6TpByPp) { RunGrid(3, 2, 1); }
TEST(ProcessGroupsTest, World6PpByDp) { RunGrid(1, 3, 2); }
TEST(ProcessGroupsTest, World6TpByDp) { RunGrid(2, 1, 3); }
TEST(ProcessGroupsTest, World6AllTp) { RunGrid(6, 1, 1); }
TEST(ProcessGroupsTest, World6AllPp) { RunGrid(1, 6, 1); }
TEST(ProcessGroupsTest, World6AllDp) { RunGrid(1, 1, 6); }
TEST(ProcessGroupsTest, SingleRank) { RunGrid(1, 1, 1); }

TEST(ProcessGroupsTest, GridMustMatchTheWorld) {
  RegisterBuiltinBackends();
  Backend* local = FindBackend("local").value();
  InProcessStore store;
  auto comm = local->Connect(store, 0, 1, CommOptions{}).value();
  auto groups = ProcessGroups::Create(*comm, RankGrid::Create(2, 1, 2).value());
  ASSERT_FALSE(groups.ok());
  EXPECT_EQ(groups.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(groups.status().message().find("has 4 ranks but communicator 'world' has 1"),
            std::string::npos)
      << groups.status().ToString();
}

}  // namespace
}  // namespace zs
