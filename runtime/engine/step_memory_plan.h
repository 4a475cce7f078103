// How a rank's CPU optimizer step uses memory: how far ahead it prefetches and whether it
// writes param_out through non-temporal stores, decided once for all of the rank's units.
//
// Contract: pure functions of their arguments (CpuOptimizer's sizing rules and this CPU's
// vendor and cache size); no allocation beyond the returned string; any thread.
//
// The units are stepped one after another, so each unit's param_out copy is evicted before it
// is read when all of them together exceed the cache-resident limit (a quarter of the
// last-level cache, or zerostack.optimizer_cache_resident_bytes:
// CpuOptimizer::CacheResidentLimitBytes), however small one unit is. Decided per unit, a model
// of many small units would never stream ([Note: streaming param_out] in
// optimizers/optimizer_spec.h).
#pragma once

#include <cstdint>
#include <string>

#include "optimizers/optimizer_spec.h"

namespace zs {

struct StepMemoryPlan {
  int64_t prefetch_elements = 0;  // for every unit's ShardStep
  ParamOutStores param_out_stores = ParamOutStores::kCached;
  int64_t working_set_bytes = 0;     // the rank's units together (StepWorkingSetBytes)
  int64_t cache_resident_bytes = 0;  // the limit it was compared with
};

// `whole`: the rank's units as one shard, sized only (n, the dtypes, which arrays exist,
// cache_resident_bytes); `configured_prefetch`: zerostack.optimizer_prefetch.
StepMemoryPlan PlanStepMemory(const OptimizerHyper& hyper, const ShardStep& whole,
                              int64_t configured_prefetch);

// For logs: "prefetch auto (256 on this CPU); this rank's 1.1 KiB of optimizer arrays fit the
// 120.0 MiB cache-resident limit: cached param_out, prefetch 256".
std::string DescribeStepMemory(const StepMemoryPlan& plan, int64_t configured_prefetch);

}  // namespace zs
