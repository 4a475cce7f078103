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

SubsetUnitAccess::SubsetUnitAccess(ModelSpec full, std::vector<Backing> backings)
    : full_(std::move(full)), backings_(std::move(backings)) {
  ZS_CHECK(!backings_.empty(), "SubsetUnitAccess without a backing access");
  owner_.assign(full_.units.size(), -1);
  local_.assign(full_.units.size(), -1);
  for (size_t b = 0; b < backings_.size(); ++b) {
    const Backing& backing = backings_[b];
    ZS_CHECK(backing.access != nullptr &&
                 backing.access->model().units.size() == backing.units.size(),
             "SubsetUnitAccess: backing {} holds {} units, the subset names {}", b,
             backing.access == nullptr ? 0 : backing.access->model().units.size(),
             backing.units.size());
    for (size_t i = 0; i < backing.units.size(); ++i) {
      const int u = backing.units[i];
      ZS_CHECK(u >= 0 && u < int(full_.units.size()) && owner_[size_t(u)] < 0,
               "SubsetUnitAccess: unit {} is out of range or in two backings", u);
      owner_[size_t(u)] = int(b);
      local_[size_t(u)] = int(i);
    }
  }
}

bool SubsetUnitAccess::holds(int unit) const {
  return unit >= 0 && unit < int(owner_.size()) && owner_[size_t(unit)] >= 0;
}

UnitAccess& SubsetUnitAccess::At(int unit) const {
  ZS_CHECK(holds(unit), "unit {} ('{}') is not held by this pipeline stage", unit,
           unit >= 0 && unit < int(full_.units.size()) ? full_.units[size_t(unit)].name : "?");
  return *backings_[size_t(owner_[size_t(unit)])].access;
}

}  // namespace zs
