// EngineConfig's checks across keys (EngineConfig::Validate, run by ParseEngineConfig and again
// by ZeroEngine::Create) and against the world size (ValidateForWorld). Every error names the
// keys and values involved.
#include <fmt/format.h>

#include <string>
#include <string_view>

#include "runtime/engine/engine_config.h"

namespace zs {
namespace {

std::string_view OffloadDeviceName(OffloadDevice d) {
  return d == OffloadDevice::kNone ? "none" : d == OffloadDevice::kCpu ? "cpu" : "nvme";
}

Status CheckOffload(const OffloadConfig& offload, const std::string& section, bool is_param,
                    int stage) {
  if (offload.device == OffloadDevice::kNone) return OkStatus();
  if (offload.device == OffloadDevice::kNvme && offload.nvme_path.empty()) {
    return InvalidArgumentError(
        fmt::format("{}.nvme_path: required when {}.device is \"nvme\"", section, section));
  }
  const int min_stage = is_param ? 3 : 1;
  if (stage < min_stage) {
    return InvalidArgumentError(
        fmt::format("{}.device: \"{}\" needs zero_optimization.stage {} (stage is {}): {}", section,
                    OffloadDeviceName(offload.device), is_param ? "3" : "1, 2 or 3", stage,
                    is_param ? "only stage 3 shards the parameters"
                             : "offload moves the optimizer's shard, and stage 0 has none"));
  }
  if (offload.device == OffloadDevice::kNvme && offload.buffer_count < 2) {
    return InvalidArgumentError(
        fmt::format("{}.buffer_count: {}; allowed: >= 2 with device \"nvme\" ({})", section,
                    offload.buffer_count,
                    is_param ? "one shard being gathered, one written back"
                             : "one sub-group stepped, one written back"));
  }
  return OkStatus();
}

// Checks that involve more than one key.
Status CheckCombinations(const EngineConfig& c) {
  if (c.fp16.enabled && c.bf16.enabled) {
    return InvalidArgumentError(
        "fp16.enabled and bf16.enabled are both true; enable at most one of them");
  }
  const int stage = c.zero_optimization.stage;
  ZS_RETURN_IF_ERROR(CheckOffload(c.zero_optimization.offload_optimizer,
                                  "zero_optimization.offload_optimizer", false, stage));
  ZS_RETURN_IF_ERROR(CheckOffload(c.zero_optimization.offload_param,
                                  "zero_optimization.offload_param", true, stage));
  const SchedulerConfig& s = c.scheduler;
  if (s.type != SchedulerType::kNone && s.warmup_min_lr > s.warmup_max_lr) {
    return InvalidArgumentError(fmt::format(
        "scheduler.params.warmup_min_lr: {} is above scheduler.params.warmup_max_lr {}; allowed: "
        "<= warmup_max_lr",
        s.warmup_min_lr, s.warmup_max_lr));
  }
  if (s.type == SchedulerType::kWarmupCosineLR && s.total_num_steps < s.warmup_num_steps) {
    return InvalidArgumentError(fmt::format(
        "scheduler.params.total_num_steps: {} is below scheduler.params.warmup_num_steps {}; "
        "allowed: >= warmup_num_steps",
        s.total_num_steps, s.warmup_num_steps));
  }
  if (c.optimizer.nesterov && c.optimizer.momentum == 0.0) {
    return InvalidArgumentError(
        "optimizer.params.nesterov: true needs optimizer.params.momentum > 0 (it is 0)");
  }
  for (size_t i = 0; i < c.zerostack.param_groups.size(); ++i) {
    const ParamGroupConfig& g = c.zerostack.param_groups[i];
    const bool sgd = c.optimizer.type == OptimizerType::kSgd;
    if (g.momentum && !sgd) {
      return InvalidArgumentError(fmt::format(
          "zerostack.param_groups[{}] (\"{}\").momentum: only SGD has momentum; use betas", i,
          g.name));
    }
    if (g.momentum && (*g.momentum == 0.0) != (c.optimizer.momentum == 0.0)) {
      return InvalidArgumentError(fmt::format(
          "zerostack.param_groups[{}] (\"{}\").momentum: {} while optimizer.params.momentum is "
          "{}; allowed: zero exactly when optimizer.params.momentum is (one momentum buffer for "
          "every group or none)",
          i, g.name, *g.momentum, c.optimizer.momentum));
    }
  }
  int64_t a = c.zerostack.alignment;
  if ((a & (a - 1)) != 0) {
    return InvalidArgumentError(fmt::format(
        "zerostack.alignment: {} is not a power of two; allowed: a power of two, 1 to 4096", a));
  }
  return OkStatus();
}

}  // namespace

Status EngineConfig::Validate() const { return CheckCombinations(*this); }

Status EngineConfig::ValidateForWorld(int dp_world_size) const {
  if (dp_world_size < 1) {
    return InvalidArgumentError(
        fmt::format("data-parallel world size {} is not positive", dp_world_size));
  }
  int64_t product = train_micro_batch_size_per_gpu * gradient_accumulation_steps * dp_world_size;
  if (train_batch_size > 0 && train_batch_size != product) {
    return InvalidArgumentError(fmt::format(
        "train_batch_size {} != train_micro_batch_size_per_gpu {} * gradient_accumulation_steps "
        "{} * data-parallel world size {} (= {})",
        train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps,
        dp_world_size, product));
  }
  return OkStatus();
}

}  // namespace zs
