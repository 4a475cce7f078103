#include "runtime/engine/step_memory_plan.h"

#include <fmt/format.h>

#include "optimizers/cpu_optimizer.h"
#include "runtime/device/memory_tracker.h"

namespace zs {

StepMemoryPlan PlanStepMemory(const OptimizerHyper& hyper, const ShardStep& whole,
                              int64_t configured_prefetch) {
  return {.prefetch_elements = configured_prefetch != kAutoPrefetch
                                   ? configured_prefetch
                                   : CpuOptimizer::PrefetchElements(whole),
          .param_out_stores = CpuOptimizer::StreamsParamOut(hyper, whole)
                                  ? ParamOutStores::kStreaming
                                  : ParamOutStores::kCached,
          .working_set_bytes = CpuOptimizer::StepWorkingSetBytes(hyper, whole),
          .cache_resident_bytes = CpuOptimizer::CacheResidentLimitBytes(whole)};
}

namespace {

std::string Prefetching(int64_t elements) {
  return elements == 0 ? std::string("no prefetch") : fmt::format("prefetch {}", elements);
}

}  // namespace

std::string DescribeStepMemory(const StepMemoryPlan& plan, int64_t configured_prefetch) {
  std::string setting = Prefetching(configured_prefetch);
  if (configured_prefetch == kAutoPrefetch) {
    setting =
        CpuOptimizer::AutoPrefetchesOnThisCpu()
            ? fmt::format("prefetch auto ({} on this CPU)", CpuOptimizer::kDefaultPrefetchElements)
            : std::string("prefetch auto (none on this CPU)");
  }
  return fmt::format(
      "{}; this rank's {} of optimizer arrays {} the {} cache-resident limit: {} param_out, {}",
      setting, FormatBytes(plan.working_set_bytes),
      plan.working_set_bytes > plan.cache_resident_bytes ? "exceed" : "fit",
      FormatBytes(plan.cache_resident_bytes),
      plan.param_out_stores == ParamOutStores::kStreaming ? "streamed" : "cached",
      Prefetching(plan.prefetch_elements));
}

}  // namespace zs
