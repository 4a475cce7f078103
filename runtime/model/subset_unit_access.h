// SubsetUnitAccess: model code that names a whole model's units, over UnitAccesses (ZeroEngines)
// that each hold some of them: a pipeline stage's units, split further between an engine of
// dense units and one of expert units.
//
// Contract
// - `full` is the whole model (the spec the model code was built for); `units` the ascending
//   list of the units this rank holds. SubsetSpec(full, units) is the spec to give the backing
//   engine (those units, in that order) and SubsetInit maps the engine's unit index back to the
//   model's, so the engine initializes exactly what the whole model would.
// - Every hook takes the model's unit index and forwards it to the backing access that holds
//   it, under that backing's index. Touching a unit this rank does not hold is a programming
//   error (ZS_CHECK naming the unit): the pipeline partition says which units a stage's code
//   may use.
// - model() returns the whole model's spec; backward_scale() is the first backing's (the dense
//   engine's: the seed of the whole objective); SetMicroBatch goes to every backing.
// - Borrows the backings (must outlive this object). One thread at a time, as UnitAccess says.
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
  struct Backing {
    std::vector<int> units;  // what SubsetSpec accepted for `full`
    UnitAccess* access;      // holds SubsetSpec(full, units) (checked: same count)
  };
  SubsetUnitAccess(ModelSpec full, std::vector<int> units, UnitAccess& backing)
      : SubsetUnitAccess(std::move(full), {Backing{std::move(units), &backing}}) {}
  // The backings' units must not overlap; the first gives backward_scale().
  SubsetUnitAccess(ModelSpec full, std::vector<Backing> backings);

  const ModelSpec& model() const override { return full_; }
  Status BeginForward(int unit) override { return At(unit).BeginForward(local(unit)); }
  Status EndForward(int unit) override { return At(unit).EndForward(local(unit)); }
  Status BeginBackward(int unit) override { return At(unit).BeginBackward(local(unit)); }
  Status EndBackward(int unit) override { return At(unit).EndBackward(local(unit)); }
  std::span<const float> Param(int unit, int param) override {
    return At(unit).Param(local(unit), param);
  }
  std::span<float> Grad(int unit, int param) override { return At(unit).Grad(local(unit), param); }
  float backward_scale() const override { return backings_[0].access->backward_scale(); }
  void SetMicroBatch(int micro_batch) override {
    for (Backing& b : backings_) b.access->SetMicroBatch(micro_batch);
  }

  bool holds(int unit) const;

 private:
  UnitAccess& At(int unit) const;  // ZS_CHECKs that the unit is held
  int local(int unit) const { return local_[size_t(unit)]; }

  ModelSpec full_;
  std::vector<Backing> backings_;
  std::vector<int> owner_;  // [model unit] -> backing index, -1 where not held
  std::vector<int> local_;  // [model unit] -> index in its backing
};

}  // namespace zs
