// SubsetUnitAccess: model code that names a whole model's units, over a UnitAccess (a
// ZeroEngine) that holds only some of them: a pipeline stage's units.
//
// Contract
// - `full` is the whole model (the spec the model code was built for); `units` the ascending
//   list of the units this rank holds. SubsetSpec(full, units) is the spec to give the backing
//   engine (those units, in that order) and SubsetInit maps the engine's unit index back to the
//   model's, so the engine initializes exactly what the whole model would.
// - Every hook takes the model's unit index and forwards it to the backing access under the
//   subset's index. Touching a unit this rank does not hold is a programming error (ZS_CHECK
//   naming the unit): the pipeline partition says which units a stage's code may use.
// - model() returns the whole model's spec; backward_scale() is the backing access's.
// - Borrows `backing` (must outlive this object). One thread at a time, as UnitAccess says.
#pragma once

#include <vector>

#include "runtime/model/unit_access.h"

namespace zs {

// The units `units` (ascending, in range) of `full`, in that order. InvalidArgument naming the
// unit for an empty, unsorted, repeated or out-of-range list.
StatusOr<ModelSpec> SubsetSpec(const ModelSpec& full, const std::vector<int>& units);
// init(subset unit, param, values) = full_init(units[subset unit], param, values).
ParamInit SubsetInit(ParamInit full_init, std::vector<int> units);

class SubsetUnitAccess final : public UnitAccess {
 public:
  // `units` must be what SubsetSpec accepted for `full`, and `backing` must hold SubsetSpec's
  // units (checked: same count).
  SubsetUnitAccess(ModelSpec full, std::vector<int> units, UnitAccess& backing);

  const ModelSpec& model() const override { return full_; }
  Status BeginForward(int unit) override { return backing_.BeginForward(Local(unit)); }
  Status EndForward(int unit) override { return backing_.EndForward(Local(unit)); }
  Status BeginBackward(int unit) override { return backing_.BeginBackward(Local(unit)); }
  Status EndBackward(int unit) override { return backing_.EndBackward(Local(unit)); }
  std::span<const float> Param(int unit, int param) override {
    return backing_.Param(Local(unit), param);
  }
  std::span<float> Grad(int unit, int param) override { return backing_.Grad(Local(unit), param); }
  float backward_scale() const override { return backing_.backward_scale(); }

  bool holds(int unit) const;
  const std::vector<int>& units() const { return units_; }

 private:
  int Local(int unit) const;

  ModelSpec full_;
  std::vector<int> units_;
  std::vector<int> local_;  // [model unit] -> subset index, -1 where not held
  UnitAccess& backing_;
};

}  // namespace zs
