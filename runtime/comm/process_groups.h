// ProcessGroups: this rank's tensor-, pipeline- and data-parallel communicators, and its
// model-parallel one (tp x pp: the ranks of one model replica), split from the world
// communicator along a RankGrid (runtime/topology/rank_grid.h).
//
// Contract
// - Create is collective over `world`: every rank of the world calls it with the same grid, in
//   the same order relative to other collectives. It splits three times, always in the order
//   tp, pp, dp, with color = the group's index along the axis and key = this rank's index
//   along the axis, so the rank of this process in group(axis) is grid.Coord(rank).index(axis)
//   and group(axis) holds exactly grid.GroupRanks(axis, rank). The groups are named "tp",
//   "pp", "dp" in errors and logs. A fourth split, color = the dp index and key =
//   grid.ModelParallelIndex(rank), gives the model-parallel group "mp" (grid.ModelParallelRanks).
// - A world whose size differs from the grid's is InvalidArgument naming both sizes; a failed
//   Split returns its error with the axis as context.
// - ProcessGroups owns the four communicators; `world` is borrowed and must outlive them (a
//   parent must outlive the communicators split from it). Movable, not copyable.
// - Thread-safety is that of the communicators (communicator.h): one thread at a time starts
//   operations on each of them.
#pragma once

#include <memory>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/topology/rank_grid.h"

namespace zs {

class ProcessGroups {
 public:
  static StatusOr<ProcessGroups> Create(Communicator& world, const RankGrid& grid);

  ProcessGroups(ProcessGroups&&) noexcept = default;
  ProcessGroups& operator=(ProcessGroups&&) noexcept = default;

  Communicator& world() const { return *world_; }
  Communicator& tp() const { return *groups_[0]; }
  Communicator& pp() const { return *groups_[1]; }
  Communicator& dp() const { return *groups_[2]; }
  Communicator& group(GridAxis axis) const { return *groups_[int(axis)]; }
  // The ranks holding the other parts of this rank's model replica (all tp x pp positions with
  // this rank's dp index), ordered tp fastest then pp.
  Communicator& model_parallel() const { return *model_parallel_; }

  const RankGrid& grid() const { return grid_; }
  GridCoord coord() const { return coord_; }

 private:
  ProcessGroups(Communicator& world, const RankGrid& grid)
      : world_(&world), grid_(grid), coord_(grid.Coord(world.rank())) {}

  Communicator* world_;  // borrowed
  RankGrid grid_;
  GridCoord coord_;
  std::unique_ptr<Communicator> groups_[3];  // indexed by GridAxis: tp, pp, dp
  std::unique_ptr<Communicator> model_parallel_;
};

}  // namespace zs
