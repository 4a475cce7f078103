#include "runtime/topology/rank_grid.h"

#include <fmt/format.h>

#include <cstdint>

namespace zs {

std::string_view GridAxisName(GridAxis axis) {
  switch (axis) {
    case GridAxis::kTp:
      return "tp";
    case GridAxis::kPp:
      return "pp";
    case GridAxis::kDp:
      return "dp";
  }
  return "?";
}

int GridCoord::index(GridAxis axis) const {
  switch (axis) {
    case GridAxis::kTp:
      return tp;
    case GridAxis::kPp:
      return pp;
    case GridAxis::kDp:
      return dp;
  }
  ZS_CHECK(false, "unknown grid axis {}", int(axis));
  return 0;
}

StatusOr<RankGrid> RankGrid::Create(int tp, int pp, int dp) {
  for (GridAxis axis : kGridAxes) {
    const int value = axis == GridAxis::kTp ? tp : axis == GridAxis::kPp ? pp : dp;
    if (value < 1) {
      return InvalidArgumentError(
          fmt::format("rank grid tp={} x pp={} x dp={}: {}={} must be at least 1", tp, pp, dp,
                      GridAxisName(axis), value));
    }
  }
  const int64_t world = int64_t{tp} * pp * dp;
  if (world > INT32_MAX) {
    return InvalidArgumentError(
        fmt::format("rank grid tp={} x pp={} x dp={} = {} ranks is more than {}", tp, pp, dp, world,
                    INT32_MAX));
  }
  return RankGrid(tp, pp, dp);
}

StatusOr<RankGrid> RankGrid::Create(int tp, int pp, int dp, int world_size) {
  ZS_ASSIGN_OR_RETURN(RankGrid grid, Create(tp, pp, dp));
  if (grid.world_size() != world_size) {
    return InvalidArgumentError(
        fmt::format("tp={} x pp={} x dp={} = {} does not equal world size {}", tp, pp, dp,
                    grid.world_size(), world_size));
  }
  return grid;
}

int RankGrid::size(GridAxis axis) const {
  switch (axis) {
    case GridAxis::kTp:
      return tp_;
    case GridAxis::kPp:
      return pp_;
    case GridAxis::kDp:
      return dp_;
  }
  ZS_CHECK(false, "unknown grid axis {}", int(axis));
  return 0;
}

int RankGrid::Stride(GridAxis axis) const {
  switch (axis) {
    case GridAxis::kTp:
      return 1;
    case GridAxis::kDp:
      return tp_;
    case GridAxis::kPp:
      return tp_ * dp_;
  }
  ZS_CHECK(false, "unknown grid axis {}", int(axis));
  return 0;
}

GridCoord RankGrid::Coord(int rank) const {
  ZS_CHECK(rank >= 0 && rank < world_size(), "rank {} is outside {} (world size {})", rank,
           ToString(), world_size());
  GridCoord c;
  c.tp = rank % tp_;
  c.dp = (rank / tp_) % dp_;
  c.pp = rank / (tp_ * dp_);
  return c;
}

int RankGrid::RankOf(const GridCoord& c) const {
  ZS_CHECK(c.tp >= 0 && c.tp < tp_ && c.pp >= 0 && c.pp < pp_ && c.dp >= 0 && c.dp < dp_,
           "coordinate (tp={}, pp={}, dp={}) is outside {}", c.tp, c.pp, c.dp, ToString());
  return c.tp + tp_ * (c.dp + dp_ * c.pp);
}

std::vector<int> RankGrid::GroupRanks(GridAxis axis, int rank) const {
  const GridCoord c = Coord(rank);
  const int stride = Stride(axis);
  const int first = rank - c.index(axis) * stride;
  std::vector<int> ranks(size_t(size(axis)));
  for (int i = 0; i < size(axis); ++i) ranks[size_t(i)] = first + i * stride;
  return ranks;
}

std::vector<int> RankGrid::ModelParallelRanks(int rank) const {
  const GridCoord c = Coord(rank);
  std::vector<int> ranks;
  ranks.reserve(size_t(tp_ * pp_));
  for (int pp = 0; pp < pp_; ++pp) {
    for (int tp = 0; tp < tp_; ++tp) ranks.push_back(RankOf(GridCoord{tp, pp, c.dp}));
  }
  return ranks;
}

int RankGrid::ModelParallelIndex(int rank) const {
  const GridCoord c = Coord(rank);
  return c.tp + tp_ * c.pp;
}

int RankGrid::GroupIndex(GridAxis axis, int rank) const {
  // Number the groups by the remaining two coordinates, slower axis first, in layout order.
  const GridCoord c = Coord(rank);
  switch (axis) {
    case GridAxis::kTp:
      return c.dp + dp_ * c.pp;
    case GridAxis::kDp:
      return c.tp + tp_ * c.pp;
    case GridAxis::kPp:
      return c.tp + tp_ * c.dp;
  }
  ZS_CHECK(false, "unknown grid axis {}", int(axis));
  return 0;
}

std::string RankGrid::ToString() const {
  return fmt::format("tp={} x pp={} x dp={} (order: tp fastest, then dp, then pp)", tp_, pp_, dp_);
}

}  // namespace zs
