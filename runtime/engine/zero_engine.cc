#include "runtime/engine/zero_engine.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <set>
#include <string>

#include "optimizers/state_codec.h"
#include "runtime/base/check.h"
#include "runtime/comm/all_gather_scalar.h"
#include "runtime/engine/zero_engine_impl.h"

namespace zs {
namespace {

uint64_t Fnv1a(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

StatusOr<TieredBuffer> ZeroEngine::Impl::AllocArray(int64_t elements, MemoryTier tier, PinMode pin,
                                                    MemoryCategory category,
                                                    const std::string& what, int unit) {
  const std::string name =
      fmt::format("engine (rank {}): {} of unit '{}'", dp_.rank(), what, model_.units[unit].name);
  auto buffer = TieredBuffer::Allocate(device_, size_t(elements) * DTypeSize(dtype_), tier, pin,
                                       category, name);
  if (!buffer.ok()) {
    return Status(buffer.status().code(),
                  fmt::format("{} ({} elements of {}): {}", name, elements, DTypeName(dtype_),
                              buffer.status().message()));
  }
  return buffer;
}

StatusOr<DeviceBuffer> ZeroEngine::Impl::Alloc(int64_t elements, DType type,
                                               MemoryCategory category, const std::string& what,
                                               int unit) {
  auto buffer = device_.Allocate(size_t(elements) * DTypeSize(type), kTier, category);
  if (!buffer.ok()) {
    return Status(
        buffer.status().code(),
        fmt::format("engine (rank {}): {} of unit '{}' ({} elements of {}): {}", dp_.rank(), what,
                    model_.units[unit].name, elements, DTypeName(type), buffer.status().message()));
  }
  return buffer;
}

// [Note: parameter groups] in optimizers/optimizer_spec.h: group 0 is optimizer.params, group
// i + 1 is the config's zerostack.param_groups[i].
int ZeroEngine::Impl::GroupIndex(const ParamSpec& param) const {
  const auto& groups = config_.zerostack.param_groups;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (groups[i].name == param.group) return int(i) + 1;
  }
  return 0;
}

Status ZeroEngine::Impl::CheckParamGroups() const {
  std::set<std::string> model_groups;
  for (const UnitSpec& unit : model_.units) {
    for (const ParamSpec& p : unit.params) {
      if (!p.group.empty()) model_groups.insert(p.group);
    }
  }
  const auto& groups = config_.zerostack.param_groups;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (!model_groups.count(groups[i].name)) {
      return InvalidArgumentError(fmt::format(
          "zerostack.param_groups[{}]: no parameter of the model is in group \"{}\" (the "
          "model's groups: {})",
          i, groups[i].name,
          model_groups.empty() ? std::string("none")
                               : fmt::format("{}", fmt::join(model_groups, ", "))));
    }
  }
  return OkStatus();
}

std::vector<GroupHyper> ZeroEngine::Impl::GroupHypers(const OptimizerHyper& hyper) const {
  std::vector<GroupHyper> out;
  out.push_back(GroupOf(hyper));
  for (const ParamGroupConfig& g : config_.zerostack.param_groups) {
    GroupHyper h = out[0];
    h.lr = float(double(hyper.lr) * g.lr_scale);
    if (g.betas) {
      if (hyper.kind != OptimizerKind::kSgd) h.beta1 = float((*g.betas)[0]);
      h.beta2 = float((*g.betas)[1]);
    }
    if (g.momentum && hyper.kind == OptimizerKind::kSgd) h.beta1 = float(*g.momentum);
    if (g.eps) h.eps = float(*g.eps);
    if (ScheduledBetas(hyper)) {  // DeepSpeed's OneCycle sets every group's betas
      h.beta1 = hyper.beta1;
      h.beta2 = hyper.beta2;
    }
    out.push_back(h);
  }
  if (frozen_group_ >= 0) {
    // [Note: frozen units]: frozen parameters of mixed units. With learning rate 0, no decay,
    // a zero gradient and states at their initial values, every kind's update leaves the
    // master's bits as they are, -0.0 included: AdamW and Lion multiply by 1 - 0 * 0 = 1 and
    // every kind then subtracts +0 (a product with lr = +0 of a zero or finite value).
    GroupHyper frozen = out[0];
    frozen.lr = 0.0f;
    out.push_back(frozen);
  }
  return out;
}

Status ZeroEngine::Impl::Init(const ParamInit& init) {
  const auto& zero = config_.zero_optimization;
  const int world = dp_.size();
  const int rank = dp_.rank();
  // Before any collective: every rank has the same config and model, so all fail alike.
  ZS_RETURN_IF_ERROR(CheckParamGroups());
  ZS_ASSIGN_OR_RETURN(gather_comm_, dp_.Split(0, rank, dp_.group_name() + ".gather"));
  ZS_ASSIGN_OR_RETURN(reduce_comm_, dp_.Split(0, rank, dp_.group_name() + ".reduce"));

  std::vector<ShardLayout> layouts;  // the reducer's: a frozen unit's is empty (no bucket)
  for (size_t u = 0; u < model_.units.size(); ++u) {
    std::vector<int64_t> sizes;
    for (const ParamSpec& p : model_.units[u].params) sizes.push_back(p.numel());
    auto layout = ShardLayout::Create(sizes, world, config_.zerostack.alignment);
    if (!layout.ok()) {
      return InvalidArgumentError(
          fmt::format("unit '{}': {}", model_.units[u].name, layout.status().message()));
    }
    const bool frozen = model_.units[u].frozen();
    if (frozen) {
      ZS_ASSIGN_OR_RETURN(ShardLayout empty,
                          ShardLayout::Create({}, world, config_.zerostack.alignment));
      layouts.push_back(std::move(empty));
    } else {
      layouts.push_back(*layout);
    }
    units_.emplace_back(std::move(*layout));
    units_.back().frozen = frozen;
    for (size_t p = 0; p < model_.units[u].params.size() && !frozen; ++p) {
      if (!model_.units[u].params[p].trainable) units_.back().frozen_params.push_back(int(p));
    }
    // [Note: frozen units]: the frozen parameters of units that also train step in a group of
    // their own, with learning rate 0, after the config's groups.
    if (!units_.back().frozen_params.empty()) {
      frozen_group_ = int(config_.zerostack.param_groups.size()) + 1;
    }
  }

  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& s = units_[u];
    const int unit = int(u);
    const int64_t padded = s.layout.padded_size();
    const int64_t shard = s.layout.shard_size();
    const int64_t shard_begin = s.layout.ShardRangeInUnit(rank).begin.value();
    s.param_base = stage() == 3 ? shard_begin : 0;
    s.grad_base = stage() >= 2 ? shard_begin : 0;
    s.opt_begin = stage() == 0 ? 0 : shard_begin;
    s.opt_size = stage() == 0 ? padded : shard;
    if (!params_on_nvme()) {  // on NVMe the shards live in param_store_
      ZS_ASSIGN_OR_RETURN(s.params,
                          AllocArray(stage() == 3 ? shard : padded, ParamTier(), ParamPin(),
                                     MemoryCategory::kParameters, "parameters", unit));
    }
    if (!s.frozen) {  // [Note: frozen units]: no gradient, no optimizer tiles
      ZS_ASSIGN_OR_RETURN(s.grads,
                          AllocArray(stage() >= 2 ? shard : padded, GradTier(), OptimizerPin(),
                                     MemoryCategory::kGradients, "gradients", unit));
    }
    // Padding and gaps stay zero in every buffer.
    if (s.params) std::memset(s.params.data(), 0, s.params.size());
    if (s.grads) std::memset(s.grads.data(), 0, s.grads.size());

    // Weight decay as metadata: one segment per parameter part in the optimizer range, and
    // decay-free segments over gaps and padding. A frozen parameter of a mixed unit: no decay,
    // in the frozen group (learning rate 0).
    if (!s.frozen) {
      int64_t at = 0;
      for (int p = 0; p < s.layout.num_params(); ++p) {
        const UnitRange part = s.layout.ParamRangeInUnit(p).Intersect(
            UnitRange{UnitOffset(s.opt_begin), UnitOffset(s.opt_begin + s.opt_size)});
        if (part.empty()) continue;
        const int64_t b = part.begin.value() - s.opt_begin, e = part.end.value() - s.opt_begin;
        if (b > at) s.segments.push_back({at, b, 0.0f});
        const ParamSpec& spec = model_.units[u].params[p];
        if (!spec.trainable) {
          s.segments.push_back({b, e, 0.0f, frozen_group_});
          at = e;
          continue;
        }
        const int group = GroupIndex(spec);
        const std::optional<double> group_wd =
            group > 0 ? config_.zerostack.param_groups[size_t(group - 1)].weight_decay
                      : std::nullopt;
        const float wd = float(group_wd.value_or(config_.optimizer.weight_decay));
        s.segments.push_back({b, e, spec.weight_decay ? wd : 0.0f, group});
        at = e;
      }
      if (at < s.opt_size) s.segments.push_back({at, s.opt_size, 0.0f});
    }
  }
  ZS_RETURN_IF_ERROR(CreateOptimizerStore());
  if (params_on_nvme()) ZS_RETURN_IF_ERROR(CreateParamStore());
  LogMixedUnits();

  // Initial values: every rank computes each parameter in full and keeps what it owns.
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& s = units_[u];
    const int unit = int(u);
    const int64_t param_size = stage() == 3 ? s.layout.shard_size() : s.layout.padded_size();
    const UnitRange param_range{UnitOffset(s.param_base), UnitOffset(s.param_base + param_size)};
    const UnitRange opt_range{UnitOffset(s.opt_begin), UnitOffset(s.opt_begin + s.opt_size)};
    std::vector<float> master(size_t(s.opt_size), 0.0f);  // padding and gaps stay zero
    std::vector<float> values;
    char* params = s.params.data_as<char>();
    if (params_on_nvme()) {
      ZS_ASSIGN_OR_RETURN(SlotView slot,
                          param_store_->Acquire(unit, ShardStore::Access::kOverwrite));
      params = slot.arrays[0];
      if (params != nullptr) std::memset(params, 0, size_t(param_size) * DTypeSize(dtype_));
    }
    for (int p = 0; p < s.layout.num_params(); ++p) {
      const UnitRange where = s.layout.ParamRangeInUnit(p);
      values.assign(size_t(where.size()), 0.0f);
      init(unit, p, std::span<float>(values));
      for (float x : values) {
        if (!std::isfinite(x)) {
          return InvalidArgumentError(fmt::format("init of unit '{}' parameter '{}' produced {}",
                                                  model_.units[u].name,
                                                  model_.units[u].params[p].name, x));
        }
      }
      const UnitRange in_params = where.Intersect(param_range);
      ConvertFromFloat(values.data() + (in_params.begin - where.begin),
                       params + (in_params.begin.value() - s.param_base) * DTypeSize(dtype_),
                       dtype_, size_t(in_params.size()));
      const UnitRange in_opt = where.Intersect(opt_range);
      std::copy_n(values.data() + (in_opt.begin - where.begin), in_opt.size(),
                  master.data() + (in_opt.begin.value() - s.opt_begin));
    }
    if (params_on_nvme()) ZS_RETURN_IF_ERROR(param_store_->Release(unit, /*dirty=*/true));
    ZS_RETURN_IF_ERROR(InitOptimizerTiles(unit, master));
  }
  states_->EndPass();  // the first pass is recorded: the steps replay it
  if (param_store_ != nullptr) param_store_->EndPass();

  ReducerOptions reducer_options;
  reducer_options.dtype = dtype_;
  reducer_options.reduction =
      stage() >= 2 ? GradReduction::kReduceScatter : GradReduction::kAllReduce;
  reducer_options.bucket_elements = zero.reduce_bucket_size;
  reducer_options.max_inflight = int(config_.zerostack.max_inflight_buckets);
  reducer_options.overlap = zero.overlap_comm;
  reducer_options.tier = kTier;
  ZS_ASSIGN_OR_RETURN(reducer_,
                      GradientReducer::Create(layouts, reducer_options, device_, *reduce_comm_));

  if (stage() == 3) {
    std::vector<GatherUnitInfo> infos;
    for (size_t u = 0; u < units_.size(); ++u) {
      infos.push_back(GatherUnitInfo{model_.units[u].name, units_[u].layout.shard_size(),
                                     units_[u].params.data(), persistent(int(u))});
    }
    GatherOptions options;
    options.dtype = dtype_;
    options.prefetch_elements = zero.stage3_prefetch_bucket_size;
    options.max_live_elements = zero.stage3_max_live_parameters;
    options.max_reuse_distance_elements = zero.stage3_max_reuse_distance;
    options.prefetch = config_.zerostack.prefetch;
    options.tier = kTier;
    options.shard_source = param_source_.get();
    ZS_ASSIGN_OR_RETURN(
        gatherer_, GatherCoordinator::Create(std::move(infos), options, device_, *gather_comm_));
  }
  return OkStatus();
}

Status ZeroEngine::Impl::CheckUnit(int unit) const {
  ZS_CHECK(unit >= 0 && unit < int(units_.size()), "unit {} out of range [0, {})", unit,
           units_.size());
  return OkStatus();
}

void ZeroEngine::Impl::SetMicroBatch(int micro_batch) {
  ZS_CHECK(micro_batch >= 0, "SetMicroBatch({}): micro-batches are numbered from 0", micro_batch);
  micro_batch_ = micro_batch;
}

Status ZeroEngine::Impl::Begin(int unit, bool backward) {
  ZS_RETURN_IF_ERROR(CheckUnit(unit));
  UnitState& s = units_[unit];
  const std::string& name = model_.units[unit].name;
  const int m = bracket_micro_batch();
  MicroBatchUse* use = s.Find(m);
  if (evaluating_) {
    // [Note: evaluation] No micro-batch record, no gradient staging: only the materialization.
    ZS_CHECK(!backward, "BeginBackward(unit '{}') during an evaluation (forward only)", name);
  } else if (backward) {
    ZS_CHECK(use != nullptr && use->backward_done + use->open_backward < use->forward_uses,
             "BeginBackward(unit '{}', micro-batch {}): its forward was bracketed {} times and "
             "{} backward brackets are already open or done",
             name, m, use == nullptr ? 0 : use->forward_uses,
             use == nullptr ? 0 : use->backward_done + use->open_backward);
    if (ordered_reduction()) NoteBackwardOrdered(m);
    if (!use->in_backward()) {
      // (A frozen unit's too: the model writes its gradient somewhere; it is dropped.)
      ZS_ASSIGN_OR_RETURN(use->grad_staging,
                          Alloc(s.layout.padded_size(), DType::kF32, MemoryCategory::kCommBuffers,
                                "gradient staging", unit));
      std::memset(use->grad_staging.data(), 0, use->grad_staging.size());
    }
    ++use->open_backward;
  } else {
    if (ordered_reduction()) ZS_RETURN_IF_ERROR(NoteForwardOrdered(unit, m));
    if (use == nullptr) use = &s.in_flight.emplace_back(m);
    ZS_CHECK(!use->in_backward() || parallel_.reduce_per_step,
             "BeginForward(unit '{}', micro-batch {}) while its backward is under way", name, m);
    ++use->forward_uses;
  }
  if (s.open++ > 0) return OkStatus();
  s.opened = TraceRecorder::Clock::now();
  if (gatherer_ != nullptr) {
    TraceRecorder::Span span = Traced(track_gather_, "gather", name);
    auto full = gatherer_->Acquire(unit);
    if (!full.ok()) {
      return Status(full.status().code(),
                    fmt::format("gathering unit '{}': {}", name, full.status().message()));
    }
    s.full = *full;
  } else {
    s.full = s.params.data();
  }
  if (dtype_ != DType::kF32) {
    ZS_ASSIGN_OR_RETURN(s.view, Alloc(s.layout.unit_size(), DType::kF32,
                                      MemoryCategory::kActivations, "fp32 view", unit));
    ConvertToFloat(s.full, dtype_, s.view.data_as<float>(), size_t(s.layout.unit_size()));
  }
  return OkStatus();
}

Status ZeroEngine::Impl::End(int unit, bool backward) {
  ZS_RETURN_IF_ERROR(CheckUnit(unit));
  UnitState& s = units_[unit];
  const std::string& name = model_.units[unit].name;
  ZS_CHECK(s.open > 0, "End{}(unit '{}') without a matching Begin",
           backward ? "Backward" : "Forward", name);
  Status status;
  if (backward && !evaluating_) {  // (Begin refused backward brackets while evaluating)
    const int m = bracket_micro_batch();
    MicroBatchUse* use = s.Find(m);
    ZS_CHECK(use != nullptr && use->open_backward > 0,
             "EndBackward(unit '{}', micro-batch {}) without BeginBackward", name, m);
    --use->open_backward;
    if (++use->backward_done == use->forward_uses && !parallel_.reduce_per_step) {
      status = CompleteMicroBatch(unit, *use);  // the gradient of this micro-batch is complete
    }
  }
  if (--s.open > 0) return status;
  if (trace_ != nullptr) {
    const char* what = backward ? "backward" : evaluating_ ? "eval forward" : "forward";
    trace_->Record(track_compute_, fmt::format("{} {}", what, name), s.opened,
                   TraceRecorder::Clock::now());
  }
  s.view.Reset();
  s.full = nullptr;
  if (gatherer_ != nullptr) {
    Status released = gatherer_->Release(unit);
    if (status.ok()) status = released;
  }
  return status;
}

std::span<const float> ZeroEngine::Impl::Param(int unit, int param) {
  (void)CheckUnit(unit);
  UnitState& s = units_[unit];
  ZS_CHECK(s.open > 0, "Param(unit '{}', {}) outside a Begin/End bracket", model_.units[unit].name,
           param);
  ZS_CHECK(param >= 0 && param < s.layout.num_params(), "unit '{}' has no parameter {}",
           model_.units[unit].name, param);
  const UnitRange where = s.layout.ParamRangeInUnit(param);
  const float* base =
      dtype_ == DType::kF32 ? static_cast<const float*>(s.full) : s.view.data_as<const float>();
  return {base + where.begin.value(), size_t(where.size())};
}

std::span<float> ZeroEngine::Impl::Grad(int unit, int param) {
  (void)CheckUnit(unit);
  UnitState& s = units_[unit];
  const MicroBatchUse* use = s.Find(bracket_micro_batch());
  ZS_CHECK(use != nullptr && use->open_backward > 0,
           "Grad(unit '{}', {}) outside a backward bracket of micro-batch {}",
           model_.units[unit].name, param, bracket_micro_batch());
  ZS_CHECK(param >= 0 && param < s.layout.num_params(), "unit '{}' has no parameter {}",
           model_.units[unit].name, param);
  const UnitRange where = s.layout.ParamRangeInUnit(param);
  return {use->grad_staging.data_as<float>() + where.begin.value(), size_t(where.size())};
}

Status ZeroEngine::Impl::BeginEvaluation() {
  if (evaluating_) return FailedPreconditionError("BeginEvaluation(): an evaluation is under way");
  if (prepared_) {
    return FailedPreconditionError("BeginEvaluation() between PrepareStep() and FinishStep()");
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    const UnitState& s = units_[u];
    if (s.open > 0 || !s.in_flight.empty() || s.reduced > 0) {
      return FailedPreconditionError(fmt::format(
          "BeginEvaluation(): unit '{}' has {} brackets open, {} micro-batch(es) in flight and {} "
          "completed since the last Step(); evaluation runs between optimizer steps",
          model_.units[u].name, s.open, s.in_flight.size(), s.reduced));
    }
  }
  if (gatherer_ != nullptr) {
    ZS_RETURN_IF_ERROR(
        gatherer_->BeginEvaluation().WithContext(fmt::format("engine (rank {})", dp_.rank())));
  }
  evaluating_ = true;
  return OkStatus();
}

Status ZeroEngine::Impl::EndEvaluation() {
  if (!evaluating_) return FailedPreconditionError("EndEvaluation() without BeginEvaluation()");
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u].open > 0) {
      return FailedPreconditionError(
          fmt::format("EndEvaluation(): unit '{}' still has {} forward brackets open",
                      model_.units[u].name, units_[u].open));
    }
  }
  evaluating_ = false;
  if (gatherer_ != nullptr) {
    ZS_RETURN_IF_ERROR(
        gatherer_->EndEvaluation().WithContext(fmt::format("engine (rank {})", dp_.rank())));
  }
  ++eval_passes_;
  return OkStatus();
}

int64_t ZeroEngine::Impl::MicroBatchesPending() const {
  int64_t n = std::numeric_limits<int64_t>::max();
  for (const UnitState& s : units_) n = std::min(n, s.reduced);
  return units_.empty() ? 0 : n;
}

StepMemoryPlan ZeroEngine::Impl::PlanStepMemory(const OptimizerHyper& hyper) const {
  // The rank's units as one shard, only sized, never stepped: CpuOptimizer reads n, the dtypes
  // and which arrays exist (every unit's step writes param_out, so a non-null marker stands for
  // it).
  static char param_out_marker = 0;
  ShardStep whole;
  for (const UnitState& s : units_) whole.n += s.frozen ? 0 : s.opt_size;
  whole.state_dtype = state_dtype();
  whole.grad_dtype = dtype_;
  whole.param_out = &param_out_marker;
  whole.param_dtype = dtype_;
  whole.cache_resident_bytes = config_.zerostack.optimizer_cache_resident_bytes;
  return zs::PlanStepMemory(hyper, whole, config_.zerostack.optimizer_prefetch);
}

static_assert(kAutoPrefetch == -1 && kMaxOptimizerPrefetch == CpuOptimizer::kMaxPrefetchElements,
              "zerostack.optimizer_prefetch's values are ShardStep::prefetch_elements'");
static_assert(kAutoCacheResident == -1,
              "zerostack.optimizer_cache_resident_bytes's values are ShardStep's");

StateDType ZeroEngine::Impl::state_dtype() const { return OptimizerStateDTypeOf(config_); }

OptimizerHyper ZeroEngine::Impl::Hyper(double lr) const {
  const OptimizerConfig& o = config_.optimizer;
  OptimizerHyper h;
  h.kind = OptimizerKindOf(o);
  h.lr = float(lr);
  h.beta1 = OptimizerMomentumOf(o);
  h.beta2 = float(o.betas[1]);
  h.eps = float(o.eps);
  h.nesterov = o.nesterov;
  h.initial_accumulator = float(o.initial_accumulator_value);
  h.step = step_ + 1;
  if (std::optional<std::array<double, 2>> betas = ScheduledBetas(h)) {
    h.beta1 = float((*betas)[0]);
    h.beta2 = float((*betas)[1]);
  }
  return h;
}

std::optional<std::array<double, 2>> ZeroEngine::Impl::ScheduledBetas(
    const OptimizerHyper& hyper) const {
  // Only optimizers with betas: DeepSpeed's OneCycle leaves the others' momentum alone.
  if (hyper.kind == OptimizerKind::kSgd || hyper.kind == OptimizerKind::kAdagrad) {
    return std::nullopt;
  }
  return schedule_->Betas(hyper.step - 1);
}

Status ZeroEngine::Impl::AllGatherUpdatedParams(bool frozen_too) {
  const int rank = dp_.rank();
  const size_t elem = DTypeSize(dtype_);
  struct Pending {
    CommHandle handle;
    int unit;
    int64_t elements;
  };
  std::deque<Pending> in_flight;
  int64_t elements_in_flight = 0;
  Status first;
  auto wait_oldest = [&] {
    Pending p = std::move(in_flight.front());
    in_flight.pop_front();
    elements_in_flight -= p.elements;
    Status s = p.handle.Wait();
    if (first.ok() && !s.ok()) {
      first = Status(s.code(), fmt::format("all-gathering the parameters of unit '{}': {}",
                                           model_.units[p.unit].name, s.message()));
    }
  };
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& s = units_[u];
    if (s.frozen && !frozen_too) continue;
    const int64_t shard = s.layout.shard_size();
    const int64_t padded = s.layout.padded_size();
    while (!in_flight.empty() &&
           elements_in_flight + padded > config_.zero_optimization.allgather_bucket_size) {
      wait_oldest();
    }
    char* full = s.params.data_as<char>();
    in_flight.push_back(Pending{
        gather_comm_->StartAllGather(full + rank * shard * elem, full, size_t(shard), dtype_),
        int(u), padded});
    elements_in_flight += padded;
  }
  while (!in_flight.empty()) wait_oldest();
  return first;
}

StatusOr<std::vector<float>> ZeroEngine::Impl::GatherMasterUnit(int unit) {
  ZS_RETURN_IF_ERROR(TilesUsable());
  UnitState& s = units_[unit];
  std::vector<float> full(size_t(s.layout.padded_size()), 0.0f);
  std::vector<float> mine;
  ZS_RETURN_IF_ERROR(ReadOptimizerRange(unit, mine));
  std::copy(mine.begin(), mine.end(), full.begin() + s.opt_begin);
  if (stage() == 0) return full;
  const int64_t shard = s.layout.shard_size();
  ZS_RETURN_IF_ERROR(
      dp_.AllGather(full.data() + dp_.rank() * shard, full.data(), size_t(shard), DType::kF32));
  return full;
}

// ---- ZeroEngine ---------------------------------------------------------------------------

StatusOr<std::unique_ptr<ZeroEngine>> ZeroEngine::Create(const EngineConfig& config,
                                                         ModelSpec model, const ParamInit& init,
                                                         Device& device, Communicator& dp,
                                                         TraceRecorder* trace,
                                                         const EngineParallelism& parallel) {
  ZS_RETURN_IF_ERROR(model.Validate());
  ZS_RETURN_IF_ERROR(config.Validate());
  ZS_RETURN_IF_ERROR(config.ValidateForWorld(dp.size()));
  if (device.kind() != DeviceKind::kCpu) {
    return UnimplementedError(fmt::format(
        "ZeroEngine on device '{}': the engine steps on CPU devices only until the fused CUDA "
        "optimizer kernels are wired in",
        device.name()));
  }
  const auto& zero = config.zero_optimization;
  if (zero.stage >= 2 && !zero.reduce_scatter) {
    return UnimplementedError(fmt::format(
        "zero_optimization.reduce_scatter=false with stage {}: stages 2 and 3 reduce-scatter "
        "their gradients; set it to true",
        zero.stage));
  }
  if (parallel.ep_rank < 0) {
    return InvalidArgumentError(
        fmt::format("EngineParallelism: ep_rank {} is negative", parallel.ep_rank));
  }
  if (parallel.tp_rank != 0 && parallel.model_parallel == nullptr) {
    return InvalidArgumentError(fmt::format(
        "EngineParallelism: tp_rank {} without a model_parallel group", parallel.tp_rank));
  }
  if (parallel.model_parallel != nullptr && (parallel.tp_rank < 0 ||
                                              parallel.tp_rank >= parallel.model_parallel->size())) {
    return InvalidArgumentError(fmt::format(
        "EngineParallelism: tp_rank {} is outside the model-parallel group '{}' of {} ranks",
        parallel.tp_rank, parallel.model_parallel->group_name(), parallel.model_parallel->size()));
  }
  auto impl = std::make_unique<Impl>(config, std::move(model), device, dp, trace, parallel);
  ZS_RETURN_IF_ERROR(impl->Init(init));
  return std::unique_ptr<ZeroEngine>(new ZeroEngine(std::move(impl)));
}

ZeroEngine::ZeroEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ZeroEngine::~ZeroEngine() = default;

const ModelSpec& ZeroEngine::model() const { return impl_->model_; }
Status ZeroEngine::BeginForward(int unit) { return impl_->Begin(unit, false); }
Status ZeroEngine::EndForward(int unit) { return impl_->End(unit, false); }
Status ZeroEngine::BeginBackward(int unit) { return impl_->Begin(unit, true); }
Status ZeroEngine::EndBackward(int unit) { return impl_->End(unit, true); }
std::span<const float> ZeroEngine::Param(int unit, int param) { return impl_->Param(unit, param); }
std::span<float> ZeroEngine::Grad(int unit, int param) { return impl_->Grad(unit, param); }
void ZeroEngine::SetMicroBatch(int micro_batch) { impl_->SetMicroBatch(micro_batch); }
bool ZeroEngine::AllowsUnusedUnit(int unit) const {
  return impl_->config_.zerostack.allow_unused_units && (stage() < 3 || impl_->persistent(unit));
}
float ZeroEngine::backward_scale() const { return impl_->backward_scale(); }
StatusOr<StepResult> ZeroEngine::Step() { return impl_->Step(); }
Status ZeroEngine::BeginEvaluation() { return impl_->BeginEvaluation(); }
Status ZeroEngine::EndEvaluation() { return impl_->EndEvaluation(); }
bool ZeroEngine::evaluating() const { return impl_->evaluating_; }
StatusOr<double> ZeroEngine::PrepareStep() { return impl_->PrepareStep(); }
StatusOr<StepResult> ZeroEngine::FinishStep(double global_sum_squares) {
  return impl_->FinishStep(global_sum_squares);
}

StatusOr<double> ZeroEngine::AllReduceMean(double local) {
  ZS_ASSIGN_OR_RETURN(const double sum, AllSumScalar(impl_->dp_, local));
  return sum / double(impl_->dp_.size());
}

StatusOr<std::vector<float>> ZeroEngine::GatherMasterParam(int unit, int param) {
  ZS_CHECK(unit >= 0 && unit < int(impl_->units_.size()), "unit {} out of range", unit);
  ZS_ASSIGN_OR_RETURN(std::vector<float> full, impl_->GatherMasterUnit(unit));
  const UnitRange where = impl_->units_[unit].layout.ParamRangeInUnit(param);
  return std::vector<float>(full.begin() + where.begin.value(), full.begin() + where.end.value());
}

StatusOr<uint64_t> ZeroEngine::MasterDigest() {
  uint64_t h = 14695981039346656037ull;
  for (size_t u = 0; u < impl_->units_.size(); ++u) {
    ZS_ASSIGN_OR_RETURN(std::vector<float> full, impl_->GatherMasterUnit(int(u)));
    const ShardLayout& layout = impl_->units_[u].layout;
    for (int p = 0; p < layout.num_params(); ++p) {
      const UnitRange where = layout.ParamRangeInUnit(p);
      h = Fnv1a(h, full.data() + where.begin.value(), size_t(where.size()) * sizeof(float));
    }
  }
  return h;
}

const EngineConfig& ZeroEngine::config() const { return impl_->config_; }
int ZeroEngine::stage() const { return impl_->config_.zero_optimization.stage; }
int ZeroEngine::world_size() const { return impl_->dp_.size(); }
int ZeroEngine::rank() const { return impl_->dp_.rank(); }
DType ZeroEngine::compute_dtype() const { return impl_->dtype_; }
const ShardLayout& ZeroEngine::layout(int unit) const { return impl_->units_[unit].layout; }
int64_t ZeroEngine::micro_batches_pending() const { return impl_->MicroBatchesPending(); }

double ZeroEngine::optimizer_bytes_per_param() const {
  const OptimizerHyper h = impl_->Hyper(0.0);
  constexpr int64_t kMany = int64_t{1} << 20;
  return 4.0 + NumStates(h.kind, h.beta1) * double(StateBytes(impl_->state_dtype(), kMany)) /
                   double(kMany);
}

std::string ZeroEngine::optimizer_summary() const {
  const int64_t threads = impl_->config_.zerostack.optimizer_threads;
  const OptimizerHyper hyper = impl_->Hyper(0.0);
  // What the step does on this rank: the plan Step itself follows.
  return fmt::format("{}, {} states, CPU kernels {} x {} thread{}, {}",
                     OptimizerKindName(hyper.kind), StateDTypeName(impl_->state_dtype()),
                     CpuOptimizer::SimdTarget(), threads, threads == 1 ? "" : "s",
                     DescribeStepMemory(impl_->PlanStepMemory(hyper),
                                        impl_->config_.zerostack.optimizer_prefetch));
}

OffloadReport ZeroEngine::offload_report() const {
  OffloadReport r;
  const ShardStore& store = *impl_->states_;
  r.optimizer_tier = std::string(MemoryTierName(store.tier()));
  // The tier the shards got (host memory may be pageable after a pin_memory fallback).
  const MemoryTier param_tier = impl_->units_.empty() || !impl_->units_[0].params
                                    ? impl_->ParamTier()
                                    : impl_->units_[0].params.tier();
  r.parameter_tier = std::string(MemoryTierName(param_tier));
  r.nvme_file = store.path();
  r.io_backend = store.io_backend();
  r.tiles = store.num_slots();
  const ShardStoreStats& st = store.stats();
  const TileCopyStats& ct = impl_->copies_->stats();
  r.device_to_host_bytes = ct.device_to_host_bytes;
  r.host_to_device_bytes = ct.host_to_device_bytes;
  r.nvme_read_bytes = st.bytes_read;
  r.nvme_written_bytes = st.bytes_written;
  r.nvme_demand_reads = st.demand_reads;
  r.nvme_prefetch_hits = st.prefetch_hits;
  r.copy_wait_seconds = ct.wait_seconds;
  r.nvme_read_wait_seconds = st.read_wait_seconds;
  r.nvme_write_wait_seconds = st.write_wait_seconds;
  if (impl_->param_store_ != nullptr) {
    const ShardStoreStats& p = impl_->param_store_->stats();
    r.param_nvme_file = impl_->param_store_->path();
    r.param_nvme_read_bytes = p.bytes_read;
    r.param_nvme_written_bytes = p.bytes_written;
    r.param_nvme_prefetch_hits = p.prefetch_hits;
    r.param_nvme_read_wait_seconds = p.read_wait_seconds;
  }
  return r;
}

GatherReport ZeroEngine::gather_report() const {
  GatherReport r;
  r.eval_passes = impl_->eval_passes_;
  if (impl_->gatherer_ == nullptr) return r;
  const GatherStats& e = impl_->gatherer_->eval_stats();
  r.eval_gathers = e.gathers;
  r.eval_prefetch_hits = e.prefetch_hits;
  r.eval_demand_gathers = e.demand_gathers;
  r.eval_trace_invalidations = e.trace_invalidations;
  const GatherStats& s = impl_->gatherer_->stats();
  r.gathers = s.gathers;
  r.prefetch_hits = s.prefetch_hits;
  r.demand_gathers = s.demand_gathers;
  r.reuse_hits = s.reuse_hits;
  r.trace_invalidations = s.trace_invalidations;
  r.peak_live_elements = s.peak_live_elements;
  r.max_live_exceeded = s.max_live_exceeded;
  return r;
}

}  // namespace zs
