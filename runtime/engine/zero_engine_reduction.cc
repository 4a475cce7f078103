// ZeroEngine's hand-over of each unit's micro-batch gradient to the reducer: at the unit's last
// EndBackward, or with zerostack.allow_unused_units in one agreed order with zeros for the
// units a micro-batch left out ([Note: unused units] in zero_engine.h); and the frozen parameters
// of units that also train ([Note: frozen units]).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "runtime/base/check.h"
#include "runtime/base/log.h"
#include "runtime/device/memory_tracker.h"
#include "runtime/engine/zero_engine_impl.h"

namespace zs {

void ZeroEngine::Impl::LogMixedUnits() const {
  if (dp_.rank() != 0) return;
  const OptimizerHyper hyper = Hyper(0.0);
  const int num_states = NumStates(hyper.kind, hyper.beta1);
  const size_t elem = DTypeSize(dtype_);
  for (size_t u = 0; u < units_.size(); ++u) {
    const UnitState& s = units_[u];
    if (s.frozen_params.empty()) continue;
    const UnitSpec& spec = model_.units[u];
    // The frozen elements this rank keeps a gradient and optimizer state for.
    const int64_t grad_size = int64_t(s.grads.size() / elem);
    const UnitRange grad_range{UnitOffset(s.grad_base), UnitOffset(s.grad_base + grad_size)};
    const UnitRange opt_range{UnitOffset(s.opt_begin), UnitOffset(s.opt_begin + s.opt_size)};
    std::vector<std::string> frozen, trainable;
    int64_t grad_elements = 0, opt_elements = 0;
    for (int p = 0; p < s.layout.num_params(); ++p) {
      const ParamSpec& param = spec.params[size_t(p)];
      (param.trainable ? trainable : frozen).push_back(param.name);
      if (param.trainable) continue;
      const UnitRange where = s.layout.ParamRangeInUnit(p);
      grad_elements += where.Intersect(grad_range).size();
      opt_elements += where.Intersect(opt_range).size();
    }
    const int64_t grad_bytes = grad_elements * int64_t(elem);
    const int64_t state_bytes = opt_elements * int64_t(sizeof(float)) +
                                num_states * StateBytes(state_dtype(), opt_elements);
    ZS_LOG_RANK(kInfo, dp_.rank(),
                "unit '{}' mixes frozen parameters ({}) with trainable ones ({}): it keeps its "
                "gradient and optimizer state over the whole unit, {} of gradients and {} of "
                "fp32 master and optimizer states on rank 0 for the frozen elements, which never "
                "change; give the frozen parameters a unit of their own to save them ([Note: "
                "frozen units])",
                spec.name, fmt::join(frozen, ", "), fmt::join(trainable, ", "),
                FormatBytes(grad_bytes), FormatBytes(state_bytes));
  }
}

void ZeroEngine::Impl::ZeroFrozenGradients(int unit, float* grad) const {
  const UnitState& s = units_[size_t(unit)];
  for (int p : s.frozen_params) {
    const UnitRange where = s.layout.ParamRangeInUnit(p);
    std::fill_n(grad + where.begin.value(), where.size(), 0.0f);
  }
}

Status ZeroEngine::Impl::ReduceMicroBatch(int unit, MicroBatchUse& use, bool accumulate) {
  UnitState& s = units_[size_t(unit)];
  const std::string& name = model_.units[size_t(unit)].name;
  if (s.frozen) {  // the staging was a scratch buffer for the model's writes
    s.Drop(use.micro_batch);
    return OkStatus();
  }
  // A mixed unit: whatever the model wrote for its frozen parameters (scratch, possibly inf or
  // NaN) becomes exact zeros, so the reduction, the norm and the optimizer see none of it.
  ZeroFrozenGradients(unit, use.grad_staging.data_as<float>());
  Status status;
  {
    TraceRecorder::Span span = Traced(track_reduce_, "reduce", name);
    status =
        reducer_->ReduceUnit(unit, use.grad_staging.data_as<float>(), s.grads.data(), accumulate);
  }
  s.Drop(use.micro_batch);  // frees the staging
  if (!status.ok()) {
    return Status(status.code(),
                  fmt::format("reducing the gradient of unit '{}': {}", name, status.message()));
  }
  return OkStatus();
}

Status ZeroEngine::Impl::CompleteMicroBatch(int unit, MicroBatchUse& use) {
  if (ordered_reduction()) return AdvanceOrdered(use.micro_batch);
  UnitState& s = units_[size_t(unit)];
  // The reducer adds it to the micro-batches reduced before and the staging is freed.
  const bool accumulate = s.reduced > 0;
  ++s.reduced;
  return ReduceMicroBatch(unit, use, accumulate);
}

Status ZeroEngine::Impl::ReduceZeros(int unit, bool accumulate) {
  UnitState& s = units_[size_t(unit)];
  if (s.frozen) return OkStatus();
  const std::string& name = model_.units[size_t(unit)].name;
  ZS_ASSIGN_OR_RETURN(DeviceBuffer zeros,
                      Alloc(s.layout.padded_size(), DType::kF32, MemoryCategory::kCommBuffers,
                            "zero gradient (unit not run)", unit));
  std::memset(zeros.data(), 0, zeros.size());
  TraceRecorder::Span span = Traced(track_reduce_, "reduce zeros", name);
  Status status = reducer_->ReduceUnit(unit, zeros.data_as<float>(), s.grads.data(), accumulate);
  if (!status.ok()) {
    return Status(status.code(), fmt::format("reducing the zero gradient of unit '{}' (not run "
                                             "in this micro-batch): {}",
                                             name, status.message()));
  }
  return OkStatus();  // the reducer copied the zeros into its buckets: `zeros` may go
}

Status ZeroEngine::Impl::NoteForwardOrdered(int unit, int micro_batch) {
  for (OrderedReduction& r : ordered_) {
    if (r.micro_batch != micro_batch || !r.unused[size_t(unit)]) continue;
    if (unit > r.next_unit) {
      return FailedPreconditionError(fmt::format(
          "BeginForward(unit '{}', micro-batch {}): the micro-batch's backward had begun without "
          "this unit and its zero gradient is already reduced (zerostack.allow_unused_units: a "
          "unit runs its forward before its micro-batch's first backward)",
          model_.units[size_t(unit)].name, micro_batch));
    }
    r.unused[size_t(unit)] = false;  // used after all: its turn waits for its backward
  }
  return OkStatus();
}

void ZeroEngine::Impl::NoteBackwardOrdered(int micro_batch) {
  for (const OrderedReduction& r : ordered_) {
    if (r.micro_batch == micro_batch) return;
  }
  OrderedReduction& r = ordered_.emplace_back();
  r.micro_batch = micro_batch;
  r.next_unit = int(units_.size()) - 1;
  r.unused.resize(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) r.unused[u] = units_[u].Find(micro_batch) == nullptr;
}

Status ZeroEngine::Impl::AdvanceOrdered(int micro_batch) {
  auto it = std::find_if(ordered_.begin(), ordered_.end(),
                         [&](const OrderedReduction& r) { return r.micro_batch == micro_batch; });
  ZS_CHECK(it != ordered_.end(), "micro-batch {} completed a unit without its first backward",
           micro_batch);
  Status status;
  while (status.ok() && it->next_unit >= 0) {
    const int u = it->next_unit;
    UnitState& s = units_[size_t(u)];
    const bool accumulate = s.reduced > 0;
    if (it->unused[size_t(u)]) {
      status = ReduceZeros(u, accumulate);
    } else {
      MicroBatchUse* use = s.Find(micro_batch);
      if (use == nullptr || !use->in_backward() || use->open_backward > 0 ||
          use->backward_done != use->forward_uses) {
        return OkStatus();  // its backward is still to come: the units below wait
      }
      status = ReduceMicroBatch(u, *use, accumulate);
    }
    ++s.reduced;
    --it->next_unit;
  }
  if (it->next_unit < 0) ordered_.erase(it);
  return status;
}

}  // namespace zs
