#include "runtime/model/subset_unit_access.h"

#include <fmt/format.h>

#include "runtime/base/check.h"

namespace zs {

StatusOr<ModelSpec> SubsetSpec(const ModelSpec& full, const std::vector<int>& units) {
  if (units.empty()) return InvalidArgumentError("a unit subset needs at least one unit");
  ModelSpec subset;
  for (size_t i = 0; i < units.size(); ++i) {
    const int u = units[i];
    if (u < 0 || u >= int(full.units.size())) {
      return InvalidArgumentError(
          fmt::format("unit subset: unit {} is outside the model's {} units", u, full.units.size()));
    }
    if (i > 0 && u <= units[i - 1]) {
      return InvalidArgumentError(fmt::format(
          "unit subset: units must be ascending and distinct; {} follows {}", u, units[i - 1]));
    }
    subset.units.push_back(full.units[size_t(u)]);
  }
  return subset;
}

ParamInit SubsetInit(ParamInit full_init, std::vector<int> units) {
  return [full_init = std::move(full_init), units = std::move(units)](
             int unit, int param, std::span<float> values) {
    full_init(units[size_t(unit)], param, values);
  };
}

SubsetUnitAccess::SubsetUnitAccess(ModelSpec full, std::vector<int> units, UnitAccess& backing)
    : full_(std::move(full)), units_(std::move(units)), backing_(backing) {
  ZS_CHECK(backing_.model().units.size() == units_.size(),
           "SubsetUnitAccess: the backing access holds {} units, the subset names {}",
           backing_.model().units.size(), units_.size());
  local_.assign(full_.units.size(), -1);
  for (size_t i = 0; i < units_.size(); ++i) local_[size_t(units_[i])] = int(i);
}

bool SubsetUnitAccess::holds(int unit) const {
  return unit >= 0 && unit < int(local_.size()) && local_[size_t(unit)] >= 0;
}

int SubsetUnitAccess::Local(int unit) const {
  ZS_CHECK(holds(unit), "unit {} ('{}') is not held by this pipeline stage", unit,
           unit >= 0 && unit < int(full_.units.size()) ? full_.units[size_t(unit)].name : "?");
  return local_[size_t(unit)];
}

}  // namespace zs
