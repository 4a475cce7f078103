// DenseUnitAccess: the simplest UnitAccess. It owns every parameter and gradient of a model in
// fp32, unsharded, in this process; a single-process reference trainer and the tests of model
// code use it.
//
// Contract
// - Built from a ModelSpec and a ParamInit that fills every parameter once; gradients start at
//   zero. Storage lives as long as the object.
// - Bracket order is checked with ZS_CHECK (a programming error, as UnitAccess says): a unit's
//   Begin/End must pair up, a unit is never nested inside itself (other units may nest),
//   Param(u, p) needs an open bracket of u, Grad(u, p) an open backward bracket of u, and every
//   BeginBackward(u) must match an earlier, not yet matched, BeginForward(u)
//   (pending_backward(u) counts those). A forward-only pass (eval) leaves its forwards pending;
//   that is allowed.
// - Gradients: unlike the ZeroEngine, this class never zeroes them by itself. Model code only
//   accumulates (+=), so gradients sum over every backward since the last ZeroGrads(): call it
//   before each step; with backward_scale() = 1 / micro_batches the sum over micro-batches is
//   the gradient of the global mean loss.
// - ParamData / GradData / UnitParams / UnitGrads give direct access without brackets (tests,
//   an optimizer step between passes).
// - backward_scale() defaults to 1.
// - Threads: not thread-safe; one thread uses it (as UnitAccess says).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/model/unit_access.h"

namespace zs {

class DenseUnitAccess final : public UnitAccess {
 public:
  // One bracket call, recorded in trace() in call order.
  struct Event {
    enum Kind : uint8_t { kBeginForward, kEndForward, kBeginBackward, kEndBackward };
    Kind kind;
    int unit;
    bool operator==(const Event&) const = default;
  };

  // ZS_CHECKs spec.Validate(): a model's spec is code, not input.
  DenseUnitAccess(ModelSpec spec, const ParamInit& init);
  DenseUnitAccess(const DenseUnitAccess&) = delete;
  DenseUnitAccess& operator=(const DenseUnitAccess&) = delete;

  const ModelSpec& model() const override { return spec_; }

  Status BeginForward(int unit) override;
  Status EndForward(int unit) override;
  Status BeginBackward(int unit) override;
  Status EndBackward(int unit) override;

  std::span<const float> Param(int unit, int param) override;
  std::span<float> Grad(int unit, int param) override;

  float backward_scale() const override { return backward_scale_; }
  void set_backward_scale(float scale) { backward_scale_ = scale; }

  // No bracket needed.
  std::span<float> ParamData(int unit, int param);
  std::span<float> GradData(int unit, int param);
  std::span<float> UnitParams(int unit);  // every parameter of the unit, in spec order
  std::span<float> UnitGrads(int unit);
  void ZeroGrads();

  int num_units() const { return static_cast<int>(spec_.units.size()); }
  // BeginForward(unit) calls not yet matched by a BeginBackward(unit).
  int pending_backward(int unit) const;
  // True when no bracket of any unit is open.
  bool idle() const;

  const std::vector<Event>& trace() const { return trace_; }
  void ClearTrace() { trace_.clear(); }

 private:
  enum class Open : uint8_t { kNone, kForward, kBackward };
  struct Unit {
    std::vector<float> params;    // every parameter, concatenated in spec order
    std::vector<float> grads;     // same layout
    std::vector<int64_t> offset;  // per parameter, into params/grads; offset.back() = numel
    Open open = Open::kNone;
    int pending_backward = 0;
  };

  void CheckUnit(int unit) const;
  void CheckParam(int unit, int param) const;

  ModelSpec spec_;
  std::vector<Unit> units_;
  float backward_scale_ = 1.0f;
  std::vector<Event> trace_;
};

}  // namespace zs
