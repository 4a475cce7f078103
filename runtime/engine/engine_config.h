// EngineConfig: the training configuration, read from a JSON file in DeepSpeed's shape.
//
// Contract
// - ParseEngineConfig() reads the JSON text of a DeepSpeed-style config. Every key it accepts
//   is a field below; the default of each field is the value written here, and docs/CONFIG.md
//   lists every key with the same default (config_docs_test keeps the two in agreement).
// - Errors are InvalidArgument and name the key by its full path ("zero_optimization.stage"),
//   the bad value and what is allowed: an unknown key (with the closest known key, if any), a
//   value of the wrong JSON type, a value out of range, an enum value not in its list, and
//   combinations that cannot work (fp16 and bf16 both enabled; offload at a stage that has no
//   such shard). Nothing is silently ignored or downgraded. Malformed JSON names the line
//   and column; a NUL byte (which would end the text early) names its byte offset; a key given
//   twice in one object is an error too.
// - DeepSpeed's "bfloat16" section is accepted as an alias of "bf16" (not both at once). A few
//   DeepSpeed keys that only affect logging are accepted and have no effect (listed in
//   EngineConfigKeys() with ignored = true and in docs/CONFIG.md).
// - DeepSpeed accepts "auto" for some values; zerostack does not (a config must say what runs).
// - Sizes (reduce_bucket_size, ...) are counted in elements, as in DeepSpeed, and accept JSON
//   integers or numbers with an integral value (5e8).
// - A plain value: copyable, no threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "optimizers/lr_schedule.h"
#include "runtime/engine/param_group_config.h"
#include "runtime/engine/program_values.h"
#include "runtime/base/status.h"

namespace zs {

enum class OffloadDevice { kNone, kCpu, kNvme };

// zero_optimization.offload_optimizer and .offload_param (offload/, docs/CONFIG.md).
struct OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;  // "none" | "cpu" | "nvme"
  std::string nvme_path;                        // required when device is nvme
  bool pin_memory = false;
  int64_t buffer_count = 5;           // NVMe staging buffers (optimizer: 4, as DeepSpeed)
  int64_t buffer_size = 100'000'000;  // elements (offload_param only in DeepSpeed)
  bool pipeline_read = false;   // optimizer, nvme: read the next sub-group while stepping one
  bool pipeline_write = false;  // optimizer, nvme: write a sub-group back while stepping the next
  int64_t max_in_cpu = 1'000'000'000;  // param, nvme: parameter elements kept in host memory

  bool operator==(const OffloadConfig&) const = default;
};

struct ZeroConfig {
  int stage = 0;                                     // 0, 1, 2 or 3
  int64_t reduce_bucket_size = 500'000'000;          // elements per gradient bucket
  int64_t allgather_bucket_size = 500'000'000;       // elements per stage 1/2 all-gather
  bool overlap_comm = false;                         // reduce while backward runs
  bool contiguous_gradients = true;                  // accepted; our buckets are always contiguous
  bool reduce_scatter = true;                        // stages 2/3: reduce-scatter, not all-reduce
  int64_t stage3_prefetch_bucket_size = 50'000'000;  // elements in flight for prefetch
  int64_t stage3_max_live_parameters = 1'000'000'000;    // gathered elements held at once
  int64_t stage3_max_reuse_distance = 1'000'000'000;     // keep a released unit if reused within
  int64_t stage3_param_persistence_threshold = 100'000;  // units this small stay gathered
  // Stage 3: a model save also writes the consolidated 16-bit weights (DeepSpeed's
  // save_16bit_model; runtime/checkpoint/safetensors_export.h). Old spelling accepted:
  // stage3_gather_fp16_weights_on_model_save.
  bool stage3_gather_16bit_weights_on_model_save = false;
  // Elements of a rank's optimizer range stepped at once under offload (a unit larger than this
  // is stepped in sub-groups); without offload units are stepped whole.
  int64_t sub_group_size = 1'000'000'000;
  OffloadConfig offload_optimizer{.buffer_count = 4};
  OffloadConfig offload_param;

  bool operator==(const ZeroConfig&) const = default;
};

struct AioConfig {
  int64_t block_size = 1'048'576;  // bytes
  int64_t queue_depth = 8;
  int64_t intra_op_parallelism = 1;
  bool single_submit = false;
  bool overlap_events = true;

  bool operator==(const AioConfig&) const = default;
};

struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0.0;           // 0 = dynamic loss scaling; > 0 = that static scale
  int initial_scale_power = 16;      // dynamic: start at 2^power
  int64_t loss_scale_window = 1000;  // steps without overflow before the scale doubles
  int64_t hysteresis = 2;            // overflows tolerated before the scale halves
  double min_loss_scale = 1.0;

  bool operator==(const Fp16Config&) const = default;
};

struct Bf16Config {
  bool enabled = false;

  bool operator==(const Bf16Config&) const = default;
};

// "AdamW" | "Adam" | "SGD" | "Adagrad" | "Lion" (case-insensitive); the update rules are in
// optimizers/optimizer_spec.h.
enum class OptimizerType { kAdamW, kAdam, kSgd, kAdagrad, kLion };

struct OptimizerConfig {
  OptimizerType type = OptimizerType::kAdamW;
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  // Applied only to parameters whose spec asks for it. DeepSpeed's default (its fused and CPU
  // Adam): 0; torch's AdamW (torch_adam) defaults to 0.01, and so does a config that asks for
  // it without giving weight_decay.
  double weight_decay = 0.0;
  // DeepSpeed's Adam keys. "AdamW" always decouples the weight decay; "Adam" decouples it when
  // adam_w_mode (DeepSpeed's default) and adds it to the gradient (L2) otherwise.
  bool adam_w_mode = true;
  bool torch_adam = false;       // torch's Adam/AdamW: the same update here
  bool bias_correction = true;   // false is not implemented
  double momentum = 0.0;                  // SGD
  bool nesterov = false;                  // SGD (needs momentum > 0)
  double initial_accumulator_value = 0.0; // Adagrad

  bool operator==(const OptimizerConfig&) const = default;
};

// DeepSpeed's schedulers with DeepSpeed's meaning: the formulas, and the step offset (optimizer
// step s runs with DeepSpeed's last_batch_iteration s - 1), are in optimizers/lr_schedule.h.
// Each type takes the parameters DeepSpeed's class takes and no others
// (SchedulerParamNames); a parameter of another type is an error naming the key and the type,
// as DeepSpeed's constructor would refuse it. "none" = optimizer.params.lr at every step.
enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR, kOneCycle,
                           kLRRangeTest };

struct SchedulerConfig {
  SchedulerType type = SchedulerType::kNone;
  // WarmupLR, WarmupDecayLR (DeepSpeed's defaults).
  double warmup_min_lr = 0.0;
  std::optional<double> warmup_max_lr;  // unset: optimizer.params.lr, as DeepSpeed
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;  // also WarmupCosineLR
  // WarmupDecayLR, WarmupCosineLR (required there).
  int64_t total_num_steps = 10000;
  // WarmupCosineLR: the ratios of optimizer.params.lr at the start and at the end.
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 0.0001;
  // OneCycle (cycle_min_lr and cycle_max_lr required).
  double cycle_min_lr = 0.0;
  double cycle_max_lr = 0.0;
  double decay_lr_rate = 0.0;
  double cycle_first_step_size = 2000;
  std::optional<double> cycle_second_step_size;    // unset: cycle_first_step_size
  int64_t cycle_first_stair_count = 0;
  std::optional<int64_t> cycle_second_stair_count;  // unset: cycle_first_stair_count
  double decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
  // LRRangeTest.
  double lr_range_test_min_lr = 1e-3;
  double lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
  // DeepSpeed's resume position; only -1 (start at the beginning) is accepted: a resumed run
  // restores the optimizer step, which positions the schedule.
  int64_t last_batch_iteration = -1;

  // The learning rate for optimizer step `step` (0-based); `base_lr` is optimizer.lr.
  double LearningRate(int64_t step, double base_lr) const;

  bool operator==(const SchedulerConfig&) const = default;
};

// The scheduler.params keys `type` takes (DeepSpeed's constructor's), and those it requires.
const std::vector<std::string>& SchedulerParamNames(SchedulerType type);
const std::vector<std::string>& SchedulerRequiredParams(SchedulerType type);

// How optimizer states are stored (optimizers/optimizer_spec.h, [Note: state layout]).
enum class OptimizerStateType { kF32, kBF16, kInt8 };  // "fp32" | "bf16" | "int8"

// The largest zerostack.optimizer_prefetch (CpuOptimizer::kMaxPrefetchElements).
inline constexpr int64_t kMaxOptimizerPrefetch = int64_t{1} << 20;

// zerostack's own keys (section "zerostack"), for what DeepSpeed's config does not say.
struct ZerostackConfig {
  int64_t comm_timeout_ms = 60'000;  // deadline of every collective
  int64_t max_inflight_buckets = 2;  // reduce buckets in flight at once (bucket buffers held)
  int64_t alignment = 16;            // shard alignment in elements (vector width)
  bool prefetch = true;              // stage 3: prefetch from the recorded trace
  OptimizerStateType optimizer_state_dtype = OptimizerStateType::kF32;
  int64_t optimizer_threads = 1;     // threads of each rank's CPU optimizer step
  // Elements ahead the CPU optimizer step prefetches its inputs: -1 auto, 0 none, at most
  // kMaxOptimizerPrefetch (ShardStep::prefetch_elements, [Note: software prefetch] in
  // optimizers/optimizer_spec.h; zero_engine.cc checks that the values agree).
  int64_t optimizer_prefetch = -1;
  // The largest optimizer working set per rank treated as cache-resident: -1 auto (a quarter of
  // the last-level cache), else bytes (ShardStep::cache_resident_bytes).
  int64_t optimizer_cache_resident_bytes = -1;
  // pin_memory where RLIMIT_MEMLOCK is too low: false, an error naming the limit; true, pageable
  // memory instead, said once in the log (offload/pinned_buffer_pool.h, [Note: memlock]).
  bool pin_memory_fallback = false;
  // Units a micro-batch may leave out (conditional computation, e.g. experts): false, Step()
  // fails naming the unit; true, its gradient of that micro-batch is zero, reduced with zeros so
  // every rank's collectives match ([Note: unused units] in zero_engine.h).
  bool allow_unused_units = false;
  // Hyper-parameters per named parameter group (param_group_config.h); empty: one group.
  std::vector<ParamGroupConfig> param_groups;

  bool operator==(const ZerostackConfig&) const = default;
};

// Which of the batch keys a config's text gave (ParseEngineConfig sets it; a config built in
// code gives the micro-batch and the accumulation steps its fields hold). Where a value came
// from, not part of the config's value: it compares equal always.
struct BatchKeysGiven {
  bool micro_batch = true;
  bool accumulation_steps = true;
  bool operator==(const BatchKeysGiven&) const { return true; }
};

struct EngineConfig {
  int64_t train_batch_size = 0;  // 0 = not given; else must equal the product
  int64_t train_micro_batch_size_per_gpu = 1;
  int64_t gradient_accumulation_steps = 1;
  BatchKeysGiven batch_keys_given;
  double gradient_clipping = 0.0;  // 0 = off; else max global L2 norm
  int64_t steps_per_print = 10;
  ZeroConfig zero_optimization;
  AioConfig aio;
  Fp16Config fp16;
  Bf16Config bf16;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  ZerostackConfig zerostack;

  // The checks across keys that parsing makes (fp16 with bf16, offload at a stage without that
  // shard, ...), for configs changed after parsing (a command line's --stage).
  Status Validate() const;
  // Checks that need the world size: train_batch_size (if given) ==
  // micro batch * accumulation steps * dp_world_size, naming all four.
  Status ValidateForWorld(int dp_world_size) const;
  // [Note: batch sizes as DeepSpeed] Any two of train_batch_size,
  // train_micro_batch_size_per_gpu and gradient_accumulation_steps determine the third at the
  // data-parallel world size, with DeepSpeed's integer divisions; one alone: train_batch_size
  // gives micro = train / world with 1 accumulation step, the micro-batch gives train = micro x
  // world; neither train_batch_size nor the micro-batch is an error. Then the product must hold.
  // Sets the derived values; errors name `source` (the config file), each of the three values
  // with where it came from (given or derived) and the world size.
  Status ResolveBatchSizes(int dp_world_size, std::string_view source);

  bool operator==(const EngineConfig&) const = default;
};

// Parses the JSON text of a config; keys not given keep the defaults above.
// The schedule the `scheduler` section describes (optimizers/lr_schedule.h); `base_lr` is
// optimizer.params.lr, used when the type is "none".
std::unique_ptr<LrSchedule> MakeLrSchedule(const SchedulerConfig& scheduler, double base_lr);

StatusOr<EngineConfig> ParseEngineConfig(std::string_view json_text);
// The same with the program's values for keys written "auto" ([Note: "auto" as the Hugging Face
// integration fills it], program_values.h): each is replaced and listed in `filled` (may be
// null), each object's keys in sorted order. Without program values an "auto" is an error
// naming what would resolve it.
StatusOr<EngineConfig> ParseEngineConfig(std::string_view json_text, const ProgramValues& program,
                                         std::vector<AutoFill>* filled);
// Reads and parses a file; errors name the path.
StatusOr<EngineConfig> LoadEngineConfig(const std::string& path);
StatusOr<EngineConfig> LoadEngineConfig(const std::string& path, const ProgramValues& program,
                                        std::vector<AutoFill>* filled);
// The config back as JSON (every key, defaults included): what a run actually used, for reports.
// Round-trips: ParseEngineConfig(EngineConfigToJson(c)) == c for every valid c.
std::string EngineConfigToJson(const EngineConfig& config);

// One accepted key, as the parser declares it (the single list behind the parser, the JSON
// writer and docs/CONFIG.md).
struct ConfigKeyInfo {
  std::string path;          // full dotted path: "zero_optimization.offload_param.device"
  std::string type;          // "integer", "size", "number", "boolean", "string", "[number, number]"
  std::string default_json;  // the default as JSON text, from a default-built EngineConfig
  std::string allowed;       // allowed values or range, as the error messages say it
  std::string description;   // one line
  bool ignored = false;      // accepted for DeepSpeed compatibility, has no effect, no field
};

// Every accepted key, in the order of the docs (sections in declaration order).
std::vector<ConfigKeyInfo> EngineConfigKeys();

// What the parser does with a DeepSpeed key (docs/CONFIG.md's "DeepSpeed keys" table, which
// config_docs_test keeps equal to DeepSpeedKeys()).
enum class DeepSpeedKeyKind {
  kRead,            // a key of the table (EngineConfigKeys(), not ignored): sets a field
  kNoEffect,        // accepted without effect: ignored keys, monitoring sections, no-op knobs
  kNotImplemented,  // refused as "not implemented" naming the feature, unless turned off
  kOldSpelling,     // another spelling of a key above (bfloat16, cpu_offload, ...)
};

struct DeepSpeedKeyInfo {
  std::string path;  // dotted; a section stands for everything in it ("tensorboard")
  DeepSpeedKeyKind kind = DeepSpeedKeyKind::kRead;
};

// Every DeepSpeed key the parser knows: the key table's (the zerostack section excepted), those
// accepted without effect, those refused as not implemented, and the old spellings. Sorted by
// path, unique.
std::vector<DeepSpeedKeyInfo> DeepSpeedKeys();

}  // namespace zs
