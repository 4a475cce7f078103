// RankGrid: the 3D layout of a job's ranks over tensor-parallel (tp), pipeline-parallel (pp)
// and data-parallel (dp) axes. A pure value: no communication, no I/O.
//
// Contract
// - world = tp * pp * dp. Ranks are laid out in one named, explicit order, Megatron-Core's
//   default: tp varies fastest, then dp, then pp (slowest):
//       rank = tp_index + tp * (dp_index + dp * pp_index)
//   So the tp group of a rank is `tp` consecutive ranks (the ranks that share a host when tp
//   fits on one host: tensor parallelism needs the fastest links), a dp group strides by tp,
//   and a pp group strides by tp * dp.
// - Every group along an axis lists its ranks ordered by their index along that axis, so a
//   rank's position in GroupRanks(axis, rank) is Coord(rank).index(axis): the rank it gets in
//   the group's communicator (ProcessGroups splits with key = that index).
// - Groups along one axis are numbered 0 .. world/size(axis)-1 by GroupIndex(); ranks of the
//   same group share the number (it is the color for Communicator::Split).
// - Create validates the sizes and returns InvalidArgument naming them; the accessors take
//   ranks in [0, world_size()) and check that as a programmer error (ZS_CHECK).
// - Copyable, immutable, thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace zs {

enum class GridAxis { kTp = 0, kPp = 1, kDp = 2 };
std::string_view GridAxisName(GridAxis axis);  // "tp", "pp", "dp"
inline constexpr GridAxis kGridAxes[] = {GridAxis::kTp, GridAxis::kPp, GridAxis::kDp};

// One rank's position in the grid.
struct GridCoord {
  int tp = 0;
  int pp = 0;
  int dp = 0;
  int index(GridAxis axis) const;
  bool operator==(const GridCoord&) const = default;
};

class RankGrid {
 public:
  // A grid of tp * pp * dp ranks; each size must be >= 1.
  static StatusOr<RankGrid> Create(int tp, int pp, int dp);
  // As above, and the product must equal `world_size`:
  // "tp=3 x pp=2 x dp=1 = 6 does not equal world size 8".
  static StatusOr<RankGrid> Create(int tp, int pp, int dp, int world_size);

  int tp_size() const { return tp_; }
  int pp_size() const { return pp_; }
  int dp_size() const { return dp_; }
  int size(GridAxis axis) const;
  int world_size() const { return tp_ * pp_ * dp_; }

  GridCoord Coord(int rank) const;
  int RankOf(const GridCoord& coord) const;

  // The ranks of the group along `axis` that contains `rank`, ordered by their axis index.
  std::vector<int> GroupRanks(GridAxis axis, int rank) const;
  // Which group along `axis` holds `rank`: 0 .. world_size()/size(axis) - 1.
  int GroupIndex(GridAxis axis, int rank) const;

  // The model-parallel group of `rank`: every rank that holds a part of the same model replica
  // (the same dp index: all tp x pp positions), ordered by ModelParallelIndex. Its number is the
  // rank's dp index. Megatron's "model parallel group"; the ZeroEngine sums the global gradient
  // norm over it.
  std::vector<int> ModelParallelRanks(int rank) const;
  // The rank's position in its model-parallel group: tp + tp_size() * pp.
  int ModelParallelIndex(int rank) const;

  // "tp=2 x pp=2 x dp=2 (order: tp fastest, then dp, then pp)"
  std::string ToString() const;

  bool operator==(const RankGrid&) const = default;

 private:
  RankGrid(int tp, int pp, int dp) : tp_(tp), pp_(pp), dp_(dp) {}
  // The stride between neighbours along `axis` in rank space.
  int Stride(GridAxis axis) const;

  int tp_;
  int pp_;
  int dp_;
};

}  // namespace zs
