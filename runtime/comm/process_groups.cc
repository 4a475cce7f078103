#include "runtime/comm/process_groups.h"

#include <fmt/format.h>

namespace zs {

StatusOr<ProcessGroups> ProcessGroups::Create(Communicator& world, const RankGrid& grid) {
  if (world.size() != grid.world_size()) {
    return InvalidArgumentError(
        fmt::format("process groups: grid {} has {} ranks but communicator '{}' has {}",
                    grid.ToString(), grid.world_size(), world.group_name(), world.size()));
  }
  ProcessGroups groups(world, grid);
  const int rank = world.rank();
  for (GridAxis axis : kGridAxes) {
    const std::string name(GridAxisName(axis));
    const int index = groups.coord_.index(axis);
    auto split = world.Split(grid.GroupIndex(axis, rank), index, name);
    if (!split.ok()) {
      return split.status().WithContext(fmt::format("splitting '{}' into the {} groups of {}",
                                                    world.group_name(), name, grid.ToString()));
    }
    std::unique_ptr<Communicator> comm = std::move(split).value();
    if (comm == nullptr || comm->size() != grid.size(axis) || comm->rank() != index) {
      return InternalError(fmt::format(
          "splitting '{}' into {} groups: rank {} expected rank {} of {} in its group, the "
          "backend gave {}",
          world.group_name(), name, rank, index, grid.size(axis),
          comm == nullptr ? std::string("no communicator")
                          : fmt::format("rank {} of {}", comm->rank(), comm->size())));
    }
    groups.groups_[int(axis)] = std::move(comm);
  }
  const int mp_index = grid.ModelParallelIndex(rank);
  const int mp_size = grid.tp_size() * grid.pp_size();
  auto split = world.Split(groups.coord_.dp, mp_index, "mp");
  if (!split.ok()) {
    return split.status().WithContext(fmt::format(
        "splitting '{}' into the model-parallel groups of {}", world.group_name(), grid.ToString()));
  }
  groups.model_parallel_ = std::move(split).value();
  const Communicator* mp = groups.model_parallel_.get();
  if (mp == nullptr || mp->size() != mp_size || mp->rank() != mp_index) {
    return InternalError(fmt::format(
        "splitting '{}' into model-parallel groups: rank {} expected rank {} of {}, the backend "
        "gave {}",
        world.group_name(), rank, mp_index, mp_size,
        mp == nullptr ? std::string("no communicator")
                      : fmt::format("rank {} of {}", mp->rank(), mp->size())));
  }
  return groups;
}

}  // namespace zs
