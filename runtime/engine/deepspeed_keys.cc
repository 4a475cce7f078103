#include "runtime/engine/deepspeed_keys.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>

#include "runtime/engine/config_json.h"

namespace zs::internal {
namespace {

// [Note: DeepSpeed's other keys] What DeepSpeed accepts beyond the key table: monitoring
// sections that do not change training are accepted and ignored; features that would change it
// and are not built are refused as "not implemented", naming the feature (never "unknown
// key"); the old spellings of offload map as DeepSpeed maps them.
struct DeepSpeedFeature {
  const char* path;     // a section or key, dotted
  const char* feature;  // what it is, for the error; nullptr = accepted and ignored
};

constexpr DeepSpeedFeature kDeepSpeedFeatures[] = {
    {"checkpoint.load_universal", "loading DeepSpeed's universal checkpoints"},
    {"checkpoint", nullptr},  // tag_validation, use_node_local_storage, parallel_write: saving
    {"dataloader_drop_last", nullptr},  // DeepSpeed's data loader; the program's here
    {"disable_allgather", nullptr},
    {"log_level", nullptr},
    {"timers", nullptr},
    {"use_data_before_expert_parallelism", nullptr},
    {"nebula", "the Nebula checkpoint service"},
    {"compile", "torch.compile and DeepCompile"},
    {"weight_quantization", "weight quantization"},
    {"quantize_training", "quantized training"},
    {"tensorboard", nullptr},
    {"wandb", nullptr},
    {"csv_monitor", nullptr},
    {"comet", nullptr},
    {"flops_profiler", nullptr},
    {"comms_logger", nullptr},
    {"activation_checkpointing",
     "activation checkpointing from the config (train_gpt --recompute recomputes per unit)"},
    {"sparse_attention", "sparse attention"},
    {"pipeline", "DeepSpeed's pipeline engine settings (train_gpt --pp and --schedule run "
                 "pipelines)"},
    {"amp", "NVIDIA Apex AMP"},
    {"torch_autocast", "torch autocast"},
    {"compression_training", "compression training"},
    {"data_efficiency", "data efficiency (curriculum learning, random-LTD)"},
    {"curriculum_learning", "curriculum learning"},
    {"eigenvalue", "eigenvalue computation"},
    {"progressive_layer_drop", "progressive layer drop"},
    {"elasticity", "elastic training"},
    {"autotuning", "the autotuner"},
    {"data_types", "gradient accumulation in another dtype (data_types.grad_accum_dtype)"},
    {"communication_data_type", "communication in another dtype"},
    {"seq_parallel_communication_data_type", "sequence-parallel communication dtype"},
    {"gradient_allreduce_op", "a gradient reduction other than the mean"},
    {"sparse_gradients", "sparse gradients"},
    {"zero_optimization.zero_hpz_partition_size", "ZeRO++ hierarchical partitioning (hpZ)"},
    {"zero_optimization.zero_quantized_weights", "ZeRO++ quantized weights (qwZ)"},
    {"zero_optimization.zero_quantized_nontrainable_weights", "ZeRO++ quantized weights"},
    {"zero_optimization.zero_quantized_gradients", "ZeRO++ quantized gradients (qgZ)"},
    {"zero_optimization.mics_shard_size", "MiCS sharding"},
    {"zero_optimization.mics_hierarchical_params_gather", "MiCS sharding"},
    {"zero_optimization.legacy_stage1", "DeepSpeed's legacy stage 1"},
    {"zero_optimization.offload_optimizer.ratio", "partial optimizer offload (ratio)"},
    {"zero_optimization.offload_optimizer.fast_init", "fast_init of NVMe offload"},
    // Accepted, no effect here: performance and debugging knobs that change no value.
    {"zero_optimization.stage3_model_persistence_threshold", nullptr},
    {"zero_optimization.stage3_module_granularity_threshold", nullptr},
    {"zero_optimization.stage3_use_all_reduce_for_fetch_params", nullptr},
    {"zero_optimization.stage3_allgather_sequential", nullptr},
    {"zero_optimization.use_multi_rank_bucket_allreduce", nullptr},
    {"zero_optimization.pipeline_loading_checkpoint", nullptr},
    {"zero_optimization.override_module_apply", nullptr},
    {"zero_optimization.log_trace_cache_warnings", nullptr},
    {"zero_optimization.enable_sanity_checks", nullptr},
    {"zero_optimization.leaf_module", nullptr},
    {"zero_optimization.offload_optimizer.cpuadam_cores_perc", nullptr},
    {"zero_optimization.zenflow", "ZenFlow (stall-free offload)"},
    {"zero_optimization.zeropp_loco_param", "ZeRO++ LoCo"},
    {"zero_optimization.save_muon_momentum_buffer_in_memory", "the Muon optimizer"},
    {"zero_optimization.offload_optimizer.super_offload", "SuperOffload"},
    {"bf16.check_grad_overflow", "skipping bf16 steps on overflow"},
    {"bf16.bf16_master_weights_and_grads", "bf16 master weights and gradients"},
    {"bf16.bf16_optimizer_states", "DeepSpeed's bf16 optimizer states (zerostack.optimizer_state_dtype "
                                   "\"bf16\" keeps them with stochastic rounding)"},
    {"fp16.consecutive_hysteresis", "the loss scaler's consecutive hysteresis"},
    {"fp16.auto_cast", "casting the model's inputs to fp16 (fp16.auto_cast)"},
    {"bf16.immediate_grad_update", "bf16 immediate gradient update"},
    {"fp16.fp16_master_weights_and_grads", "fp16 master weights and gradients"},
    {"hybrid_engine", "DeepSpeed-Chat's hybrid engine (inference kernels in training)"},
};

// DeepSpeed's optimizers that are not built (optimizer.type, any case).
constexpr const char* kOptimizersNotBuilt[] = {"Lamb",      "OneBitAdam", "ZeroOneAdam",
                                               "OneBitLamb", "Muon",      "MuAdam",
                                               "MuAdamW",   "MuSGD",      "Adafactor"};

// Values that mean "off" in DeepSpeed for a feature key: accepted as no-ops.
bool IsOff(const Json& value) {
  if (value.is_null()) return true;
  if (value.is_boolean()) return !value.get<bool>();
  if (value.is_object()) {
    auto enabled = value.find("enabled");
    return enabled != value.end() && enabled->is_boolean() && !enabled->get<bool>();
  }
  return false;
}

}  // namespace

std::vector<DeepSpeedKeyInfo> DeepSpeedKeysOutsideTheTable() {
  std::vector<DeepSpeedKeyInfo> keys;
  for (const DeepSpeedFeature& f : kDeepSpeedFeatures) {
    keys.push_back({f.path, f.feature != nullptr ? DeepSpeedKeyKind::kNotImplemented
                                                 : DeepSpeedKeyKind::kNoEffect});
  }
  keys.push_back({"gradient_predivide_factor", DeepSpeedKeyKind::kNoEffect});
  // The old spellings: rewritten below, and in ParseEngineConfig (bfloat16, the 16-bit save).
  for (const char* old_spelling :
       {"bfloat16", "zero_optimization.cpu_offload", "zero_optimization.cpu_offload_param",
        "zero_optimization.cpu_offload_use_pin_memory",
        "zero_optimization.stage3_gather_fp16_weights_on_model_save"}) {
    keys.push_back({old_spelling, DeepSpeedKeyKind::kOldSpelling});
  }
  return keys;
}

Status ApplyDeepSpeedFeatures(Json& root) {
  for (const DeepSpeedFeature& f : kDeepSpeedFeatures) {
    std::string pointer = "/" + std::string(f.path);
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    const Json::json_pointer at(pointer);
    if (!root.contains(at)) continue;
    const std::string path(f.path);
    const Json& value = root.at(at);
    const bool off = IsOff(value) ||
                     (path == "zero_optimization.zero_hpz_partition_size" && value == Json(1)) ||
                     (path == "zero_optimization.mics_shard_size" && value == Json(-1)) ||
                     (path == "gradient_allreduce_op" && value == Json("mean")) ||
                     (path == "communication_data_type" && value == Json("fp32"));
    if (f.feature != nullptr && !off) {
      return InvalidArgumentError(fmt::format("{}: not implemented in zerostack ({}); remove the "
                                              "key or turn it off",
                                              path, f.feature));
    }
    root.at(at.parent_pointer()).erase(at.back());  // accepted: monitoring, or off
  }
  if (const Json::json_pointer type("/optimizer/type");
      root.contains(type) && root.at(type).is_string()) {
    const std::string name = root.at(type).get<std::string>();
    for (const char* not_built : kOptimizersNotBuilt) {
      if (Lower(name) == Lower(not_built)) {
        return InvalidArgumentError(fmt::format(
            "optimizer.type: \"{}\" is not implemented in zerostack (its optimizers: AdamW, "
            "Adam, SGD, Adagrad, Lion)",
            name));
      }
    }
  }
  if (auto it = root.find("gradient_predivide_factor"); it != root.end()) {
    if (!it->is_number() || !(it->get<double>() > 0)) {
      return InvalidArgumentError(fmt::format(
          "gradient_predivide_factor: expected a number > 0, {}; allowed: > 0 (accepted, no "
          "effect: the averaged gradient is the same up to rounding)",
          Got(*it)));
    }
    root.erase(it);
  }
  // The old offload spellings, as DeepSpeed maps them: cpu_offload -> offload_optimizer on
  // the CPU, cpu_offload_param -> offload_param on the CPU, cpu_offload_use_pin_memory -> their
  // pin_memory.
  auto zero = root.find("zero_optimization");
  if (zero == root.end() || !zero->is_object()) return OkStatus();
  const bool pin = zero->contains("cpu_offload_use_pin_memory") &&
                   (*zero)["cpu_offload_use_pin_memory"].is_boolean() &&
                   (*zero)["cpu_offload_use_pin_memory"].get<bool>();
  for (const auto& [old_key, new_key] : {std::pair<const char*, const char*>{
                                             "cpu_offload", "offload_optimizer"},
                                         {"cpu_offload_param", "offload_param"}}) {
    auto it = zero->find(old_key);
    if (it == zero->end()) continue;
    if (!it->is_boolean()) {
      return InvalidArgumentError(fmt::format(
          "zero_optimization.{}: expected a JSON boolean (true or false), {}", old_key,
          Got(*it)));
    }
    const bool on = it->get<bool>();
    zero->erase(it);
    if (!on) continue;
    if (zero->contains(new_key)) {
      return InvalidArgumentError(fmt::format(
          "both \"zero_optimization.{}\" and its old spelling \"zero_optimization.{}\" are given; "
          "use {}",
          new_key, old_key, new_key));
    }
    (*zero)[new_key] = Json{{"device", "cpu"}, {"pin_memory", pin}};
  }
  if (auto it = zero->find("cpu_offload_use_pin_memory"); it != zero->end()) {
    if (!it->is_boolean()) {
      return InvalidArgumentError(fmt::format(
          "zero_optimization.cpu_offload_use_pin_memory: expected a JSON boolean (true or "
          "false), {}",
          Got(*it)));
    }
    zero->erase(it);
  }
  return OkStatus();
}

Status CheckNoNul(std::string_view text) {
  const size_t nul = text.find('\0');
  if (nul == std::string_view::npos) return OkStatus();
  const std::string_view before = text.substr(0, nul);
  const size_t line = 1 + size_t(std::count(before.begin(), before.end(), '\n'));
  const size_t line_start = before.rfind('\n');
  const size_t column = nul - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
  return InvalidArgumentError(fmt::format(
      "a NUL byte at byte offset {} (line {}, column {}) of {} bytes; a JSON config is text "
      "without NUL bytes (the parser would stop there and drop the rest)",
      nul, line, column, text.size()));
}

// [Note: bounded input] A config is a few levels of objects; a text nested deeper is refused
// before the JSON parser sees it, whose recursion (and the duplicate-key finder's path per
// level) would otherwise grow with the depth: 100,000 nested '[' overflowed the stack.
Status CheckNesting(std::string_view text) {
  int depth = 0, line = 1, column = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    ++column;
    if (ch == '\n') {
      ++line;
      column = 0;
    }
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      }
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > kMaxConfigNesting) {
        return InvalidArgumentError(fmt::format(
            "the config nests objects and arrays more than {} levels deep (line {}, column "
            "{}); a DeepSpeed config needs a few",
            kMaxConfigNesting, line, column));
      }
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return OkStatus();
}

}  // namespace zs::internal
