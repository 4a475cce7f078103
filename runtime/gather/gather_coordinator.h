// GatherCoordinator: stage 3's parameter residency. Turns each unit's shard into the unit's
// full parameters on demand, prefetches the next units from the recorded execution trace, and
// releases them after use, within the configured memory budget.
//
// Contract
// - Built from one GatherUnitInfo per unit: the unit's name, its shard (shard_elements of
//   `dtype`, owned by the caller, updated by the optimizer between steps) and whether it is
//   persistent. A unit's gathered buffer holds world_size * shard_elements elements: rank r's
//   shard at [r * shard_elements, (r + 1) * shard_elements) (the ShardLayout's unit frame,
//   padding included).
// - [Note: identical decisions on every rank] Acquire/Release/EndStep are called in the same
//   order on every rank (every rank runs the same model code), and every decision (what to
//   prefetch, keep or free) depends only on that call sequence, the recorded trace and the
//   options, never on timing or on whether a transfer has finished. So every rank starts the
//   same all-gathers in the same order, as the Communicator requires.
// - Unit states (one place checks transitions):
//     kSharded    only the shard exists; no gathered buffer.
//     kGathering  the gathered buffer is allocated and its all-gather is in flight.
//     kGathered   the buffer holds the full parameters (in use or kept for reuse).
//   Persistent units (numel <= stage3_param_persistence_threshold) are gathered at Create and
//   stay kGathered; their buffers count as MemoryCategory::kParameters. Every other gathered
//   buffer counts as kGatheredParameters.
// - Acquire(u) blocks the calling thread until u's buffer holds the full parameters, and
//   returns it; acquires nest (a reference count). Before returning it starts prefetches:
//   walking the trace from the current position, it starts the all-gathers of the next units
//   while the elements in flight stay <= prefetch_elements and the gathered elements held stay
//   <= max_live_elements; the walk stops at the first unit that does not fit. "In flight"
//   means prefetched and not yet acquired (whether or not the transfer has finished, which is
//   never asked: see the note above). A demand gather is started before the prefetches and
//   waited for after them, so they queue behind it.
// - Release(u) drops one reference. At zero a non-persistent unit is freed, unless the trace
//   says it is acquired again within max_reuse_distance_elements (the sum of the sizes of the
//   units acquired in between; persistent units weigh 0) and keeping it stays within
//   max_live_elements. Only a replayed trace predicts reuse: while recording, units are freed.
// - Bound: gathered (non-persistent) elements never exceed max_live_elements plus the unit
//   being acquired; if units already in use are larger than that, it is them plus that unit.
//   Kept-for-reuse and prefetched units are freed first when a demanded unit needs room.
//   [Note: soft cap] max_live_elements (stage3_max_live_parameters) is a soft cap: prefetches
//   and kept units respect it, but a demanded unit is always gathered, so one unit larger than
//   the cap (or units in use plus the demanded one) exceed it. Each gather that leaves more
//   than max_live_elements held counts in GatherStats::max_live_exceeded (peak_live_elements
//   has the peak), and the first one logs a warning (once per coordinator) naming the unit, the
//   elements held and the cap.
// - [Note: trace] The first step records the sequence of Acquire calls; EndStep() commits it.
//   Later steps replay it: each Acquire is compared with the trace at the current position.
//   On a mismatch (the execution order changed) the trace is invalidated safely: in-flight
//   prefetches are waited for, every prefetched-but-unused and kept unit is freed, and the
//   coordinator records again from this Acquire on (the matched prefix is kept); EndStep()
//   commits the new trace. The unit being acquired is exempt: if it was prefetched or kept it
//   is used (and counted as a prefetch or reuse hit). A step that ends before the trace does
//   also invalidates it (the trace is truncated there). See execution_trace.h.
// - [Note: evaluation trace] Forward-only passes between training steps (a held-out loss) have a
//   trace of their own: BeginEvaluation() (FailedPrecondition unless at a training step boundary:
//   no unit acquired and the training trace at its start, i.e. before the first Acquire or right
//   after EndStep) switches Acquire/Release/prefetch/reuse to the evaluation trace and counters
//   (eval_stats()); EndEvaluation() ends the pass as EndStep ends a step (every non-persistent
//   unit freed; the evaluation trace committed, replayed by the next pass, or invalidated as
//   above) and switches back. The training trace and stats() are untouched by evaluation, so
//   the next training step replays and prefetches exactly as without it.
// - Units with shard_elements == 0 take part in nothing: no buffer, no all-gather, no stats;
//   Acquire returns a non-null pointer that must not be dereferenced.
// - Shards are read by the all-gathers directly (no copy): a shard must not change between
//   the first Acquire of a step and EndStep(), nor during Create/RegatherPersistent. With a
//   ShardSource, each all-gather holds its unit's shard from its start until it is waited for,
//   and a prefetch stops at a unit whose shard the source has no room for.
// - EndStep() requires every unit released (else FailedPrecondition naming the units still
//   acquired, and nothing changes); it waits for and frees all non-persistent buffers. Call
//   RegatherPersistent() after the optimizer updated the shards (collective; FailedPrecondition
//   if a persistent unit is acquired).
// - Errors: a failed all-gather or allocation is returned by the call that waits for it (the
//   communicator is then broken). After an error the coordinator is broken too: Acquire and
//   RegatherPersistent return kAborted naming the first error; Release and EndStep still
//   free memory. A unit id out of range, or Release without Acquire, is a ZS_CHECK.
// - The destructor waits for in-flight all-gathers (ignoring their errors), then frees.
// - Threads: one thread calls all methods (the rank's compute thread). Transfers run on the
//   communicator's own threads; the buffers are not touched by the host while kGathering.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/dtype.h"
#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/device.h"

namespace zs {

struct GatherUnitInfo {
  std::string name;
  int64_t shard_elements = 0;
  // shard_elements of GatherOptions::dtype, owned by the caller; null with a ShardSource.
  const void* shard = nullptr;
  bool persistent = false;
};

// Where shards come from when they do not stay in memory (offload_param to NVMe): the
// coordinator asks for a unit's shard just before its all-gather starts and gives it back once
// the all-gather has finished. Called on the coordinator's thread.
class ShardSource {
 public:
  virtual ~ShardSource() = default;
  // Blocks until unit u's shard is in memory; it stays there, unchanged, until ReleaseShard(u).
  virtual StatusOr<const void*> AcquireShard(int unit) = 0;
  virtual Status ReleaseShard(int unit) = 0;
  // Whether AcquireShard(u) would find room now (a prefetch stops where it would not).
  virtual bool CanAcquireShard(int unit) const = 0;
};

struct GatherOptions {
  DType dtype = DType::kF32;
  int64_t prefetch_elements = 50'000'000;               // stage3_prefetch_bucket_size
  int64_t max_live_elements = 1'000'000'000;            // stage3_max_live_parameters
  int64_t max_reuse_distance_elements = 1'000'000'000;  // stage3_max_reuse_distance
  bool prefetch = true;                                 // false: gather only on demand
  MemoryTier tier = MemoryTier::kHost;                  // where gathered buffers live
  ShardSource* shard_source = nullptr;  // not owned; null: GatherUnitInfo::shard is read
};

enum class UnitGatherState { kSharded, kGathering, kGathered };

// Counters since Create (or the last ResetStats), for tests, logs and reports.
struct GatherStats {
  int64_t gathers = 0;         // all-gathers started (persistent ones included)
  int64_t prefetch_hits = 0;   // Acquire found its unit already prefetched (in flight or done)
  int64_t reuse_hits = 0;      // Acquire found its unit kept from an earlier Release
  int64_t demand_gathers = 0;  // Acquire had to start the gather itself
  int64_t trace_invalidations = 0;
  int64_t prefetched_unused_freed = 0;  // prefetched units freed unused at an invalidation
  int64_t peak_live_elements = 0;       // gathered non-persistent elements held at once
  // Gathers that left more than max_live_elements held ([Note: soft cap]); 0 within the cap.
  int64_t max_live_exceeded = 0;
};

class GatherCoordinator {
 public:
  // Collective (persistent units are gathered here). `device` and `comm` must outlive it.
  static StatusOr<std::unique_ptr<GatherCoordinator>> Create(std::vector<GatherUnitInfo> units,
                                                             GatherOptions options, Device& device,
                                                             Communicator& comm);
  ~GatherCoordinator();

  StatusOr<const void*> Acquire(int unit);
  Status Release(int unit);
  Status EndStep();
  Status RegatherPersistent();

  // [Note: evaluation trace]. Both return FailedPrecondition naming what is in the way (and
  // change nothing) when called at the wrong time.
  Status BeginEvaluation();
  Status EndEvaluation();
  bool evaluating() const;

  UnitGatherState state(int unit) const;
  bool trace_recorded() const;  // a committed training trace exists and is being replayed
  const GatherStats& stats() const;       // training steps
  const GatherStats& eval_stats() const;  // evaluation passes
  void ResetStats();                      // both
  int64_t live_elements() const;  // gathered non-persistent elements held now

 private:
  class Impl;
  explicit GatherCoordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zs
