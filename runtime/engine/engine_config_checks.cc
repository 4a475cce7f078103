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
  // The scheduler's parameters are not checked against each other: DeepSpeed accepts a
  // warm-up that falls (warmup_min_lr above warmup_max_lr) and a total_num_steps below
  // warmup_num_steps (with a warning), and its formulas define both (lr_schedule.h).
  const OptimizerConfig& o = c.optimizer;
  const bool adam = o.type == OptimizerType::kAdam || o.type == OptimizerType::kAdamW;
  const OptimizerConfig defaults;
  if (!adam) {  // DeepSpeed passes these on to a non-Adam optimizer, which refuses them
    for (const auto& [name, differs] :
         {std::pair<const char*, bool>{"adam_w_mode", o.adam_w_mode != defaults.adam_w_mode},
          {"torch_adam", o.torch_adam != defaults.torch_adam},
          {"bias_correction", o.bias_correction != defaults.bias_correction}}) {
      if (differs) {
        return InvalidArgumentError(fmt::format(
            "optimizer.params.{}: a parameter of Adam and AdamW only", name));
      }
    }
  }
  if (!o.bias_correction) {
    return InvalidArgumentError(
        "optimizer.params.bias_correction: false is not implemented (Adam without bias "
        "correction); remove the key or set it to true");
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

Status EngineConfig::ResolveBatchSizes(int dp_world_size, std::string_view source) {
  const std::string where = source.empty() ? std::string("the config")
                                           : fmt::format("config {}", source);
  if (dp_world_size < 1) {
    return InvalidArgumentError(
        fmt::format("data-parallel world size {} is not positive", dp_world_size));
  }
  const int64_t world = dp_world_size;
  const bool train = train_batch_size > 0;
  const bool micro = batch_keys_given.micro_batch;
  const bool accumulation = batch_keys_given.accumulation_steps;
  if (train && micro && !accumulation) {
    gradient_accumulation_steps = train_batch_size / train_micro_batch_size_per_gpu / world;
  } else if (train && accumulation && !micro) {
    train_micro_batch_size_per_gpu = train_batch_size / world / gradient_accumulation_steps;
  } else if (micro && !train) {
    if (!accumulation) gradient_accumulation_steps = 1;
    train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * world;
  } else if (train && !micro && !accumulation) {
    gradient_accumulation_steps = 1;
    train_micro_batch_size_per_gpu = train_batch_size / world;
  } else if (!train && !micro) {
    return InvalidArgumentError(fmt::format(
        "{} gives neither train_batch_size nor train_micro_batch_size_per_gpu; one of them is "
        "needed (with gradient_accumulation_steps, any two determine the third)",
        where));
  }
  auto origin = [](bool given) { return given ? "given" : "derived"; };
  const std::string values = fmt::format(
      "train_batch_size {} ({}), train_micro_batch_size_per_gpu {} ({}), "
      "gradient_accumulation_steps {} ({}), data-parallel world size {}",
      train_batch_size, origin(train), train_micro_batch_size_per_gpu, origin(micro),
      gradient_accumulation_steps, origin(accumulation), world);
  if (train_micro_batch_size_per_gpu < 1 || gradient_accumulation_steps < 1) {
    return InvalidArgumentError(
        fmt::format("{}: the batch sizes leave no whole micro-batch or accumulation step: {}",
                    where, values));
  }
  if (train_batch_size != train_micro_batch_size_per_gpu * gradient_accumulation_steps * world) {
    return InvalidArgumentError(fmt::format(
        "{}: train_batch_size must equal train_micro_batch_size_per_gpu x "
        "gradient_accumulation_steps x data-parallel world size: {}",
        where, values));
  }
  batch_keys_given = {};  // every value is now set (a second call keeps them)
  return OkStatus();
}

}  // namespace zs
