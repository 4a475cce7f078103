#include "runtime/gather/gather_coordinator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <utility>

#include "runtime/base/check.h"
#include "runtime/base/log.h"
#include "runtime/gather/execution_trace.h"

namespace zs {
namespace {

// What Acquire returns for a unit without elements: a valid address that is never read.
alignas(64) constexpr std::byte kEmptyUnitStorage[64] = {};

std::string_view StateName(UnitGatherState s) {
  switch (s) {
    case UnitGatherState::kSharded:
      return "sharded";
    case UnitGatherState::kGathering:
      return "gathering";
    case UnitGatherState::kGathered:
      return "gathered";
  }
  return "?";
}

}  // namespace

class GatherCoordinator::Impl {
 public:
  struct Unit {
    std::string name;
    int64_t shard_elements = 0;
    int64_t elements = 0;  // world_size * shard_elements
    const void* shard = nullptr;
    bool persistent = false;

    // See the state table in the header. Transitions happen only in StartGather (kSharded ->
    // kGathering), FinishGather (kGathering -> kGathered) and Free (any -> kSharded).
    UnitGatherState state = UnitGatherState::kSharded;
    DeviceBuffer buffer;       // allocated unless kSharded (persistent: always once created)
    CommHandle handle;         // the all-gather; unwaited only while kGathering
    int refs = 0;              // Acquire nesting depth
    bool shard_held = false;   // the ShardSource's shard is held by the in-flight all-gather
    bool prefetched = false;   // started by a prefetch and not acquired since (kGathering)
    bool kept = false;         // released to zero refs, kept for a predicted reuse
    int64_t prefetch_seq = 0;  // order of prefetch starts (evict the newest first)
  };

  Impl(std::vector<Unit> units, GatherOptions options, Device& device, Communicator& comm,
       std::vector<int64_t> trace_weights)
      : units_(std::move(units)),
        options_(options),
        device_(device),
        comm_(comm),
        train_trace_(trace_weights),
        eval_trace_(std::move(trace_weights)) {}

  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

  ~Impl() {
    for (size_t u = 0; u < units_.size(); ++u) {
      if (units_[u].state == UnitGatherState::kGathering) units_[u].handle.Wait().IgnoreError();
      ReleaseShard(int(u)).IgnoreError();
    }
    // The buffers are freed by ~Unit now that no transfer writes them.
  }

  Status GatherPersistent() {
    for (size_t u = 0; u < units_.size(); ++u) {
      if (units_[u].refs > 0 && units_[u].persistent) {
        return FailedPreconditionError(
            fmt::format("RegatherPersistent: persistent unit {} ('{}') is acquired ({} refs)", u,
                        units_[u].name, units_[u].refs));
      }
    }
    for (size_t u = 0; u < units_.size(); ++u) {
      if (units_[u].persistent && units_[u].elements > 0) {
        ZS_RETURN_IF_ERROR(Fail(StartGather(int(u))));
        // A ShardSource holds a shard per gather in flight: one at a time, whatever their number.
        if (options_.shard_source != nullptr) ZS_RETURN_IF_ERROR(Fail(FinishGather(int(u))));
      }
    }
    Status first;
    for (size_t u = 0; u < units_.size(); ++u) {
      if (units_[u].state == UnitGatherState::kGathering) {
        Status s = FinishGather(int(u));
        if (first.ok()) first = s;
      }
    }
    return Fail(first);
  }

  StatusOr<const void*> Acquire(int u) {
    CheckUnit(u);
    ZS_RETURN_IF_ERROR(CheckUsable());
    Unit& unit = units_[u];

    // [Note: trace] Compare with the trace, or record.
    if (trace_->replaying()) {
      if (!trace_->Advance(u)) {
        ZS_RETURN_IF_ERROR(InvalidateTrace(u));
        trace_->Diverge();
        trace_->Record(u);
      }
    } else {
      trace_->Record(u);
    }

    if (unit.persistent || unit.elements == 0 || unit.refs > 0) {
      // Held already (persistent, nested) or nothing to hold (empty).
      if (unit.elements == 0 && !unit.persistent) unit.state = UnitGatherState::kGathered;
    } else {
      ZS_RETURN_IF_ERROR(Take(u));
    }

    // Prefetch before waiting, so the next transfers queue behind this unit's. (A failed
    // all-gather frees the unit, so refs are counted only once it holds its parameters.)
    Status prefetch_status;
    if (options_.prefetch && trace_->replaying()) prefetch_status = Prefetch();
    if (unit.state == UnitGatherState::kGathering) ZS_RETURN_IF_ERROR(Fail(FinishGather(u)));
    ZS_RETURN_IF_ERROR(prefetch_status);
    ++unit.refs;
    return DataOf(unit);
  }

  // Acquire of a non-persistent, non-empty unit with no refs: starts its gather unless it was
  // prefetched or kept, and counts which of the three it was.
  Status Take(int u) {
    Unit& unit = units_[u];
    switch (unit.state) {
      case UnitGatherState::kSharded:
        ZS_RETURN_IF_ERROR(MakeRoom(u));
        ZS_RETURN_IF_ERROR(Fail(StartGather(u)));
        ++stats_->demand_gathers;
        break;
      case UnitGatherState::kGathering:
        ZS_CHECK(unit.prefetched, "unit {} in flight without a prefetch", u);
        ++stats_->prefetch_hits;
        break;
      case UnitGatherState::kGathered:
        ZS_CHECK(unit.kept, "unit {} gathered with no refs and not kept", u);
        ++stats_->reuse_hits;
        break;
    }
    if (unit.prefetched) {
      prefetched_elements_ -= unit.elements;
      unit.prefetched = false;
    }
    unit.kept = false;
    return OkStatus();
  }

  Status Release(int u) {
    CheckUnit(u);
    Unit& unit = units_[u];
    ZS_CHECK(unit.refs > 0, "Release({}) of unit '{}' that is not acquired", u, unit.name);
    if (--unit.refs > 0 || unit.persistent) return OkStatus();
    if (unit.elements == 0) {
      unit.state = UnitGatherState::kSharded;
      return OkStatus();
    }
    if (trace_->replaying() && live_ <= options_.max_live_elements) {
      std::optional<int64_t> distance = trace_->ReuseDistance(u);
      if (distance.has_value() && *distance <= options_.max_reuse_distance_elements) {
        unit.kept = true;
        return OkStatus();
      }
    }
    return Free(u);  // gathered and waited: nothing to wait for
  }

  Status EndStep() {
    std::string acquired;
    for (size_t u = 0; u < units_.size(); ++u) {
      if (units_[u].refs > 0) {
        acquired += fmt::format("{}{} ('{}', {} refs)", acquired.empty() ? "" : ", ", u,
                                units_[u].name, units_[u].refs);
      }
    }
    if (!acquired.empty()) {
      return FailedPreconditionError(
          fmt::format("EndStep with units still acquired: {}", acquired));
    }
    if (trace_->replaying() && trace_->position() < trace_->size()) {
      // The step ended before the trace: an invalidation (EndStep frees everything anyway).
      ++stats_->trace_invalidations;
      for (const Unit& unit : units_) stats_->prefetched_unused_freed += unit.prefetched ? 1 : 0;
    }
    Status first;
    for (size_t u = 0; u < units_.size(); ++u) {
      if (!units_[u].persistent && units_[u].state != UnitGatherState::kSharded) {
        Status s = Free(int(u));
        if (first.ok()) first = s;
      }
    }
    trace_->EndStep();
    ZS_CHECK(live_ == 0 && prefetched_elements_ == 0, "EndStep left {} live, {} prefetched", live_,
             prefetched_elements_);
    ZS_RETURN_IF_ERROR(Fail(first));
    return broken_.ok() ? OkStatus() : BrokenError();
  }

  Status RegatherPersistent() {
    ZS_RETURN_IF_ERROR(CheckUsable());
    return GatherPersistent();
  }

  UnitGatherState state(int u) const {
    CheckUnit(u);
    return units_[u].state;
  }
  bool trace_recorded() const { return train_trace_.replaying(); }
  const GatherStats& stats() const { return train_stats_; }
  const GatherStats& eval_stats() const { return eval_stats_; }
  bool evaluating() const { return evaluating_; }
  void ResetStats() {
    train_stats_ = GatherStats{};
    eval_stats_ = GatherStats{};
    stats_->peak_live_elements = live_;
  }

  // [Note: evaluation trace] Switches to the evaluation trace and counters, at a training step
  // boundary only, so the training trace is left exactly where EndStep left it.
  Status BeginEvaluation() {
    if (evaluating_) return FailedPreconditionError("BeginEvaluation during an evaluation pass");
    for (size_t u = 0; u < units_.size(); ++u) {
      if (units_[u].refs > 0) {
        return FailedPreconditionError(
            fmt::format("BeginEvaluation while unit {} ('{}') is acquired ({} refs)", u,
                        units_[u].name, units_[u].refs));
      }
    }
    if (trace_->position() != 0 || (!trace_->replaying() && trace_->size() != 0) || live_ != 0) {
      return FailedPreconditionError(fmt::format(
          "BeginEvaluation in the middle of a training step (trace entry {} of {}, {} gathered "
          "elements held); call EndStep first",
          trace_->position(), trace_->size(), live_));
    }
    evaluating_ = true;
    trace_ = &eval_trace_;
    stats_ = &eval_stats_;
    return OkStatus();
  }

  // Ends the evaluation pass as EndStep ends a training step (frees every non-persistent unit,
  // commits or rewinds the evaluation trace), then switches back to the training trace. If
  // units are still acquired, nothing changes (FailedPrecondition).
  Status EndEvaluation() {
    if (!evaluating_) return FailedPreconditionError("EndEvaluation without BeginEvaluation");
    Status s = EndStep();
    if (s.code() == StatusCode::kFailedPrecondition) return s;  // units still acquired
    evaluating_ = false;
    trace_ = &train_trace_;
    stats_ = &train_stats_;
    return s;
  }
  int64_t live_elements() const { return live_; }

 private:
  void CheckUnit(int u) const {
    ZS_CHECK(u >= 0 && u < int(units_.size()), "unit {} out of range [0, {})", u, units_.size());
  }

  static const void* DataOf(const Unit& unit) {
    return unit.elements == 0 ? static_cast<const void*>(kEmptyUnitStorage) : unit.buffer.data();
  }

  Status BrokenError() const {
    return AbortedError(
        fmt::format("gather coordinator on rank {} is broken by an earlier error: {}", comm_.rank(),
                    broken_.ToString()));
  }
  Status CheckUsable() const { return broken_.ok() ? OkStatus() : BrokenError(); }
  // Records the first error; returns `s`.
  Status Fail(Status s) {
    if (!s.ok() && broken_.ok()) broken_ = s;
    return s;
  }

  // kSharded (or a persistent unit's regather) -> kGathering: allocates the gathered buffer if
  // the unit has none and starts its all-gather, reading the shard directly.
  Status StartGather(int u) {
    Unit& unit = units_[u];
    ZS_CHECK(unit.elements > 0 && unit.state != UnitGatherState::kGathering,
             "StartGather({}) of a unit with {} elements in state {}", u, unit.elements,
             StateName(unit.state));
    // The shard first: a source that fails leaves no gathered buffer behind.
    const void* shard = unit.shard;
    if (options_.shard_source != nullptr) {
      StatusOr<const void*> held = options_.shard_source->AcquireShard(u);
      if (!held.ok()) {
        return held.status().WithContext(fmt::format("shard of unit {} ('{}')", u, unit.name));
      }
      shard = *held;
      unit.shard_held = true;
    }
    if (!unit.buffer) {
      const size_t bytes = size_t(unit.elements) * DTypeSize(options_.dtype);
      StatusOr<DeviceBuffer> buffer = device_.Allocate(
          bytes, options_.tier,
          unit.persistent ? MemoryCategory::kParameters : MemoryCategory::kGatheredParameters);
      if (!buffer.ok()) {
        ReleaseShard(u).IgnoreError();  // the allocation's error is the one reported
        return buffer.status().WithContext(
            fmt::format("gathering unit {} ('{}', {} elements of {})", u, unit.name, unit.elements,
                        DTypeName(options_.dtype)));
      }
      unit.buffer = std::move(*buffer);
      if (!unit.persistent) {
        live_ += unit.elements;
        stats_->peak_live_elements = std::max(stats_->peak_live_elements, live_);
        if (live_ > options_.max_live_elements) NoteCapExceeded(u);
      }
    }
    unit.handle = comm_.StartAllGather(shard, unit.buffer.data(), size_t(unit.shard_elements),
                                       options_.dtype);
    unit.state = UnitGatherState::kGathering;
    ++stats_->gathers;
    return OkStatus();
  }

  // [Note: soft cap] A demanded unit is gathered even when it takes the held elements past
  // max_live_elements: counted every time, logged the first time.
  void NoteCapExceeded(int u) {
    ++stats_->max_live_exceeded;
    if (cap_warned_) return;
    cap_warned_ = true;
    ZS_LOG_RANK(kWarn, comm_.rank(),
                "stage3_max_live_parameters is a soft cap: gathering unit {} ('{}', {} elements) "
                "holds {} gathered elements > stage3_max_live_parameters {}; counted in the "
                "gather report's max_live_exceeded (logged once)",
                u, units_[u].name, units_[u].elements, live_, options_.max_live_elements);
  }

  // Gives a unit's shard back to the ShardSource once its all-gather no longer reads it.
  Status ReleaseShard(int u) {
    Unit& unit = units_[u];
    if (!unit.shard_held) return OkStatus();
    unit.shard_held = false;
    return options_.shard_source->ReleaseShard(u);
  }

  // kGathering -> kGathered, blocking until the all-gather finished. On failure the unit is
  // freed (non-persistent) and the error returned.
  Status FinishGather(int u) {
    Unit& unit = units_[u];
    ZS_CHECK(unit.state == UnitGatherState::kGathering, "FinishGather({}) in state {}", u,
             StateName(unit.state));
    Status s = unit.handle.Wait();
    unit.state = UnitGatherState::kGathered;
    Status released = ReleaseShard(u);
    if (s.ok()) s = released;
    if (s.ok()) return s;
    if (!unit.persistent) Free(u).IgnoreError();
    return s.WithContext(fmt::format("all-gather of unit {} ('{}')", u, unit.name));
  }

  // Any state -> kSharded for a non-persistent unit with no refs: waits for an in-flight
  // all-gather (returning its error), then frees the buffer.
  Status Free(int u) {
    Unit& unit = units_[u];
    ZS_CHECK(!unit.persistent && unit.refs == 0, "Free({}) of unit '{}' (persistent {}, refs {})",
             u, unit.name, unit.persistent, unit.refs);
    Status s;
    if (unit.state == UnitGatherState::kGathering) s = unit.handle.Wait();
    Status released = ReleaseShard(u);
    if (s.ok()) s = released;
    if (unit.prefetched) prefetched_elements_ -= unit.elements;
    if (unit.buffer) live_ -= unit.elements;
    unit.buffer.Reset();
    unit.prefetched = false;
    unit.kept = false;
    unit.state = UnitGatherState::kSharded;
    if (!s.ok()) return s.WithContext(fmt::format("all-gather of unit {} ('{}')", u, unit.name));
    return s;
  }

  // Before a demand gather of u: frees kept units (furthest next use first), then prefetched
  // ones (newest first), until u fits within max_live_elements or nothing is left to free.
  Status MakeRoom(int u) {
    const int64_t need = units_[u].elements;
    while (live_ + need > options_.max_live_elements) {
      int victim = -1;
      int64_t victim_distance = -1;
      for (size_t v = 0; v < units_.size(); ++v) {
        if (units_[v].refs > 0 || !units_[v].kept) continue;
        const int64_t d = trace_->ReuseDistance(int(v)).value_or(kNever);
        if (d > victim_distance) victim = int(v), victim_distance = d;
      }
      if (victim < 0) {
        int64_t newest = -1;
        for (size_t v = 0; v < units_.size(); ++v) {
          if (units_[v].refs > 0 || !units_[v].prefetched) continue;
          if (units_[v].prefetch_seq > newest) victim = int(v), newest = units_[v].prefetch_seq;
        }
      }
      if (victim < 0) break;
      ZS_RETURN_IF_ERROR(Fail(Free(victim)));
    }
    return OkStatus();
  }

  // Walks the trace from its position and starts the all-gathers of the units not held, in
  // order, while they fit in prefetch_elements (in flight) and max_live_elements (held).
  Status Prefetch() {
    for (size_t i = trace_->position(); i < trace_->size(); ++i) {
      const int v = trace_->at(i);
      Unit& unit = units_[v];
      if (unit.persistent || unit.elements == 0 || unit.state != UnitGatherState::kSharded) {
        continue;
      }
      if (prefetched_elements_ + unit.elements > options_.prefetch_elements) break;
      if (live_ + unit.elements > options_.max_live_elements) break;
      if (options_.shard_source != nullptr && !options_.shard_source->CanAcquireShard(v)) break;
      ZS_RETURN_IF_ERROR(Fail(StartGather(v)));
      unit.prefetched = true;
      unit.prefetch_seq = ++prefetch_seq_;
      prefetched_elements_ += unit.elements;
    }
    return OkStatus();
  }

  // [Note: trace] The order changed at Acquire(acquiring): waits for and frees every
  // prefetched-but-unused and kept unit except the one being acquired.
  Status InvalidateTrace(int acquiring) {
    ++stats_->trace_invalidations;
    Status first;
    for (size_t v = 0; v < units_.size(); ++v) {
      Unit& unit = units_[v];
      if (int(v) == acquiring || unit.refs > 0 || !(unit.prefetched || unit.kept)) continue;
      if (unit.prefetched) ++stats_->prefetched_unused_freed;
      Status s = Free(int(v));
      if (first.ok()) first = s;
    }
    return Fail(first);
  }

  std::vector<Unit> units_;
  const GatherOptions options_;
  Device& device_;
  Communicator& comm_;
  // [Note: evaluation trace] Training steps and evaluation passes record and replay separate
  // traces and count separate stats; trace_ and stats_ point at the active pair.
  ExecutionTrace train_trace_;
  ExecutionTrace eval_trace_;
  ExecutionTrace* trace_ = &train_trace_;
  GatherStats train_stats_;
  GatherStats eval_stats_;
  GatherStats* stats_ = &train_stats_;
  bool evaluating_ = false;
  int64_t live_ = 0;                 // elements of non-persistent units with a buffer
  int64_t prefetched_elements_ = 0;  // elements of units with `prefetched` set
  int64_t prefetch_seq_ = 0;
  bool cap_warned_ = false;  // [Note: soft cap] logged once per coordinator
  Status broken_;  // the first error; OK while usable
};

StatusOr<std::unique_ptr<GatherCoordinator>> GatherCoordinator::Create(
    std::vector<GatherUnitInfo> units, GatherOptions options, Device& device, Communicator& comm) {
  if (options.prefetch_elements < 0 || options.max_live_elements < 0 ||
      options.max_reuse_distance_elements < 0) {
    return InvalidArgumentError(fmt::format(
        "GatherCoordinator: negative option (prefetch_elements {}, max_live_elements {}, "
        "max_reuse_distance_elements {})",
        options.prefetch_elements, options.max_live_elements, options.max_reuse_distance_elements));
  }
  if (!device.Supports(options.tier)) {
    return InvalidArgumentError(fmt::format("GatherCoordinator: device {} lacks the {} tier",
                                            device.name(), MemoryTierName(options.tier)));
  }
  const int64_t world = comm.size();
  std::vector<Impl::Unit> impl_units;
  std::vector<int64_t> weights;
  impl_units.reserve(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    GatherUnitInfo& info = units[u];
    if (info.shard_elements < 0 ||
        (info.shard_elements > 0 && info.shard == nullptr && options.shard_source == nullptr)) {
      return InvalidArgumentError(
          fmt::format("GatherCoordinator: unit {} ('{}') has shard_elements {} and shard {}", u,
                      info.name, info.shard_elements, info.shard));
    }
    Impl::Unit& unit = impl_units.emplace_back();
    unit.name = std::move(info.name);
    unit.shard_elements = info.shard_elements;
    unit.elements = info.shard_elements * world;
    unit.shard = info.shard;
    unit.persistent = info.persistent;
    weights.push_back(unit.persistent ? 0 : unit.elements);
  }
  // Persistent units start kSharded; GatherPersistent leaves them kGathered.
  auto impl =
      std::make_unique<Impl>(std::move(impl_units), options, device, comm, std::move(weights));
  ZS_RETURN_IF_ERROR(impl->GatherPersistent());
  return std::unique_ptr<GatherCoordinator>(new GatherCoordinator(std::move(impl)));
}

GatherCoordinator::GatherCoordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GatherCoordinator::~GatherCoordinator() = default;

StatusOr<const void*> GatherCoordinator::Acquire(int unit) { return impl_->Acquire(unit); }
Status GatherCoordinator::Release(int unit) { return impl_->Release(unit); }
Status GatherCoordinator::EndStep() { return impl_->EndStep(); }
Status GatherCoordinator::RegatherPersistent() { return impl_->RegatherPersistent(); }
UnitGatherState GatherCoordinator::state(int unit) const { return impl_->state(unit); }
bool GatherCoordinator::trace_recorded() const { return impl_->trace_recorded(); }
const GatherStats& GatherCoordinator::stats() const { return impl_->stats(); }
void GatherCoordinator::ResetStats() { impl_->ResetStats(); }
const GatherStats& GatherCoordinator::eval_stats() const { return impl_->eval_stats(); }
Status GatherCoordinator::BeginEvaluation() { return impl_->BeginEvaluation(); }
Status GatherCoordinator::EndEvaluation() { return impl_->EndEvaluation(); }
bool GatherCoordinator::evaluating() const { return impl_->evaluating(); }
int64_t GatherCoordinator::live_elements() const { return impl_->live_elements(); }

}  // namespace zs
