#include "runtime/model/dense_unit_access.h"

#include <algorithm>

namespace zs {

DenseUnitAccess::DenseUnitAccess(ModelSpec spec, const ParamInit& init) : spec_(std::move(spec)) {
  Status valid = spec_.Validate();
  ZS_CHECK(valid.ok(), "DenseUnitAccess: invalid ModelSpec: {}", valid.ToString());
  units_.resize(spec_.units.size());
  for (size_t u = 0; u < spec_.units.size(); ++u) {
    Unit& unit = units_[u];
    int64_t offset = 0;
    for (const ParamSpec& p : spec_.units[u].params) {
      unit.offset.push_back(offset);
      offset += p.numel();
    }
    unit.offset.push_back(offset);
    unit.params.assign(offset, 0.0f);
    unit.grads.assign(offset, 0.0f);
    for (size_t p = 0; p < spec_.units[u].params.size(); ++p) {
      init(static_cast<int>(u), static_cast<int>(p),
           ParamData(static_cast<int>(u), static_cast<int>(p)));
    }
  }
}

void DenseUnitAccess::CheckUnit(int unit) const {
  ZS_CHECK(unit >= 0 && unit < num_units(), "unit {} is not in [0, {})", unit, num_units());
}

void DenseUnitAccess::CheckParam(int unit, int param) const {
  CheckUnit(unit);
  const int n = static_cast<int>(spec_.units[unit].params.size());
  ZS_CHECK(param >= 0 && param < n, "unit '{}' has no parameter {} (it has {})",
           spec_.units[unit].name, param, n);
}

Status DenseUnitAccess::BeginForward(int unit) {
  CheckUnit(unit);
  Unit& u = units_[unit];
  ZS_CHECK(u.open == Open::kNone, "BeginForward({}) while unit '{}' is already open", unit,
           spec_.units[unit].name);
  u.open = Open::kForward;
  ++u.pending_backward;
  trace_.push_back({Event::kBeginForward, unit});
  return OkStatus();
}

Status DenseUnitAccess::EndForward(int unit) {
  CheckUnit(unit);
  ZS_CHECK(units_[unit].open == Open::kForward, "EndForward({}) without BeginForward({})", unit,
           unit);
  units_[unit].open = Open::kNone;
  trace_.push_back({Event::kEndForward, unit});
  return OkStatus();
}

Status DenseUnitAccess::BeginBackward(int unit) {
  CheckUnit(unit);
  Unit& u = units_[unit];
  ZS_CHECK(u.open == Open::kNone, "BeginBackward({}) while unit '{}' is already open", unit,
           spec_.units[unit].name);
  ZS_CHECK(u.pending_backward > 0,
           "BeginBackward({}): unit '{}' has no forward bracket left to match", unit,
           spec_.units[unit].name);
  --u.pending_backward;
  u.open = Open::kBackward;
  trace_.push_back({Event::kBeginBackward, unit});
  return OkStatus();
}

Status DenseUnitAccess::EndBackward(int unit) {
  CheckUnit(unit);
  ZS_CHECK(units_[unit].open == Open::kBackward, "EndBackward({}) without BeginBackward({})", unit,
           unit);
  units_[unit].open = Open::kNone;
  trace_.push_back({Event::kEndBackward, unit});
  return OkStatus();
}

std::span<const float> DenseUnitAccess::Param(int unit, int param) {
  CheckParam(unit, param);
  ZS_CHECK(units_[unit].open != Open::kNone, "Param({}, {}) outside a bracket of unit '{}'", unit,
           param, spec_.units[unit].name);
  return ParamData(unit, param);
}

std::span<float> DenseUnitAccess::Grad(int unit, int param) {
  CheckParam(unit, param);
  ZS_CHECK(units_[unit].open == Open::kBackward,
           "Grad({}, {}) outside a backward bracket of unit '{}'", unit, param,
           spec_.units[unit].name);
  return GradData(unit, param);
}

std::span<float> DenseUnitAccess::ParamData(int unit, int param) {
  CheckParam(unit, param);
  Unit& u = units_[unit];
  return std::span<float>(u.params).subspan(u.offset[param], u.offset[param + 1] - u.offset[param]);
}

std::span<float> DenseUnitAccess::GradData(int unit, int param) {
  CheckParam(unit, param);
  Unit& u = units_[unit];
  return std::span<float>(u.grads).subspan(u.offset[param], u.offset[param + 1] - u.offset[param]);
}

std::span<float> DenseUnitAccess::UnitParams(int unit) {
  CheckUnit(unit);
  return units_[unit].params;
}

std::span<float> DenseUnitAccess::UnitGrads(int unit) {
  CheckUnit(unit);
  return units_[unit].grads;
}

void DenseUnitAccess::ZeroGrads() {
  for (Unit& u : units_) std::fill(u.grads.begin(), u.grads.end(), 0.0f);
}

int DenseUnitAccess::pending_backward(int unit) const {
  CheckUnit(unit);
  return units_[unit].pending_backward;
}

bool DenseUnitAccess::idle() const {
  return std::all_of(units_.begin(), units_.end(),
                     [](const Unit& u) { return u.open == Open::kNone; });
}

}  // namespace zs
