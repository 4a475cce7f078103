#include "runtime/engine/engine_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>

#include "optimizers/lr_schedule.h"
#include "runtime/base/edit_distance.h"
#include "runtime/engine/auto_values.h"
#include "runtime/engine/config_json.h"
#include "runtime/engine/config_key_decl.h"
#include "runtime/engine/deepspeed_keys.h"
#include "runtime/engine/param_groups_json.h"

namespace zs {
namespace {

using Json = nlohmann::json;
using namespace internal;  // config_json.h, config_key_decl.h

// [Note: one key table]
// Every accepted key is declared once, in Keys() below: its path, type, allowed values, a
// line of description, a reader (JSON value -> field, with the range check) and a writer
// (field -> JSON value). The parser, EngineConfigToJson() and EngineConfigKeys() (hence the
// docs test) all walk this one table, so a key cannot be parsed without being documented, and
// a default is whatever a default-built EngineConfig holds.
// Sections: JSON objects that hold keys. A key's section is its path up to the last '.'.
constexpr const char* kSections[] = {
    "zero_optimization",
    "zero_optimization.offload_optimizer",
    "zero_optimization.offload_param",
    "aio",
    "fp16",
    "bf16",
    "optimizer",
    "optimizer.params",
    "scheduler",
    "scheduler.params",
    "zerostack",
};

#define ZS_FIELD(member) \
  [](auto& c) -> auto& { return c.member; }

std::vector<KeyDecl> OffloadKeys(const std::string& section, bool is_param) {
  std::vector<KeyDecl> keys;
  std::string what = is_param ? "parameters" : "optimizer states";
  auto offload = [is_param](EngineConfig& c) -> OffloadConfig& {
    return is_param ? c.zero_optimization.offload_param : c.zero_optimization.offload_optimizer;
  };
  keys.push_back(EnumKey(
      section + ".device", [offload](EngineConfig & c) -> auto& { return offload(c).device; },
      {{"none", OffloadDevice::kNone},
       {"cpu", OffloadDevice::kCpu},
       {"nvme", OffloadDevice::kNvme}},
      false,
      is_param ? std::string("stage 3: where parameter shards live between uses (cpu: host "
                             "memory; nvme: files under nvme_path, read ahead of each gather)")
               : std::string("stages 1-3: where the fp32 master and optimizer states live and are "
                             "stepped (cpu: host memory, CPU kernels; nvme: files under nvme_path, "
                             "stepped by sub_group_size)")));
  keys.push_back(StringKey(
      section + ".nvme_path", [offload](EngineConfig & c) -> auto& { return offload(c).nvme_path; },
      "a directory; required when device is nvme", "directory for nvme offload files"));
  keys.push_back(BoolKey(
      section + ".pin_memory",
      [offload](EngineConfig & c) -> auto& { return offload(c).pin_memory; },
      "page-locked host memory for the offloaded arrays and staging buffers (checked against "
      "ulimit -l)"));
  keys.push_back(IntKey(
      section + ".buffer_count",
      [offload](EngineConfig & c) -> auto& { return offload(c).buffer_count; }, 1, kNoMax,
      is_param ? "nvme: parameter shards held in memory at once (staging buffers; at least 2)"
               : "nvme: sub-groups held in memory at once (staging buffers; at least 2)"));
  keys.push_back(SizeKey(
      section + ".buffer_size",
      [offload](EngineConfig & c) -> auto& { return offload(c).buffer_size; }, 1,
      is_param ? "no effect (a staging buffer holds one unit's shard)"
               : "no effect (not a DeepSpeed key here: a staging buffer holds one sub-group)"));
  if (is_param) {
    keys.push_back(SizeKey(
        section + ".max_in_cpu",
        [offload](EngineConfig & c) -> auto& { return offload(c).max_in_cpu; }, 0,
        "accepted; no effect yet (shards are cached only in the staging buffers)"));
  } else {
    keys.push_back(BoolKey(
        section + ".pipeline_read",
        [offload](EngineConfig & c) -> auto& { return offload(c).pipeline_read; },
        "nvme: read the next sub-groups while one is stepped"));
    keys.push_back(BoolKey(
        section + ".pipeline_write",
        [offload](EngineConfig & c) -> auto& { return offload(c).pipeline_write; },
        "nvme: write a stepped sub-group back while the next is stepped"));
  }
  return keys;
}

const std::vector<KeyDecl>& Keys() {
  static const std::vector<KeyDecl>* const keys = [] {
    auto* k = new std::vector<KeyDecl>();
    // Top level.
    k->push_back(IntKey("train_batch_size", ZS_FIELD(train_batch_size), 0, kNoMax,
                        "global batch per optimizer step; 0 = not given, else must equal micro "
                        "batch * accumulation steps * data-parallel world size"));
    k->push_back(IntKey("train_micro_batch_size_per_gpu", ZS_FIELD(train_micro_batch_size_per_gpu),
                        1, kNoMax, "samples per rank per forward/backward pass"));
    k->push_back(IntKey("gradient_accumulation_steps", ZS_FIELD(gradient_accumulation_steps), 1,
                        kNoMax, "micro batches accumulated before each optimizer step"));
    k->push_back(NumberKey("gradient_clipping", ZS_FIELD(gradient_clipping), {0.0, true},
                           "max global L2 norm of the gradients; 0 = no clipping"));
    k->push_back(IntKey("steps_per_print", ZS_FIELD(steps_per_print), 1, kNoMax,
                        "optimizer steps between progress reports"));
    k->push_back(
        IgnoredBoolKey("wall_clock_breakdown", "DeepSpeed timing printout; accepted and ignored"));
    k->push_back(IgnoredBoolKey("zero_allow_untested_optimizer",
                                "DeepSpeed permission flag; accepted and ignored"));
    k->push_back(IgnoredBoolKey("zero_force_ds_cpu_optimizer",
                                "DeepSpeed's choice of its CPU Adam; the CPU kernels here always"));
    k->push_back(IgnoredBoolKey("memory_breakdown",
                                "DeepSpeed memory printout; the tracker reports memory always"));
    k->push_back(IgnoredBoolKey("dump_state", "DeepSpeed state printout; accepted and ignored"));
    k->push_back(IgnoredBoolKey("prescale_gradients",
                                "DeepSpeed divides before or after the sum; the averaged gradient "
                                "is the same up to rounding, divided once after the sum here"));
    k->push_back(IgnoredBoolKey("zero_optimization.allgather_partitions",
                                "all-gather (true) or broadcast (false) the updated partitions: "
                                "the same parameters; all-gathered here"));
    k->push_back(IgnoredBoolKey("zero_optimization.round_robin_gradients",
                                "DeepSpeed's order of offloaded gradient copies: the same values"));
    k->push_back(IgnoredBoolKey("zero_optimization.elastic_checkpoint",
                                "DeepSpeed's checkpoint layout; runtime/checkpoint reshards always"));
    k->push_back(IgnoredBoolKey("zero_optimization.load_from_fp32_weights",
                                "DeepSpeed loads the fp32 masters on resume; so does a "
                                "runtime/checkpoint load"));
    k->push_back(IgnoredBoolKey("zero_optimization.memory_efficient_linear",
                                "DeepSpeed's stage-3 linear that frees its input early: the same "
                                "values"));
    k->push_back(IgnoredBoolKey("zero_optimization.ignore_unused_parameters",
                                "DeepSpeed (default true) tolerates parameters without gradient "
                                "at stage 3; here a unit unused in a micro-batch is an error"));
    // zero_optimization.
    k->push_back(IntKey("zero_optimization.stage", ZS_FIELD(zero_optimization.stage), 0, 3,
                        "ZeRO stage: 0 = replicated, 1 = shard optimizer states, 2 = also "
                        "gradients, 3 = also parameters"));
    k->push_back(SizeKey("zero_optimization.reduce_bucket_size",
                         ZS_FIELD(zero_optimization.reduce_bucket_size), 1,
                         "elements per gradient reduction bucket"));
    k->push_back(SizeKey("zero_optimization.allgather_bucket_size",
                         ZS_FIELD(zero_optimization.allgather_bucket_size), 1,
                         "stages 1 and 2: elements of updated parameters all-gathered at once (a "
                         "larger unit goes alone)"));
    k->push_back(BoolKey("zero_optimization.overlap_comm", ZS_FIELD(zero_optimization.overlap_comm),
                         "reduce gradient buckets while backward still runs"));
    k->push_back(BoolKey("zero_optimization.contiguous_gradients",
                         ZS_FIELD(zero_optimization.contiguous_gradients),
                         "accepted for compatibility; gradient buckets are always contiguous"));
    k->push_back(BoolKey("zero_optimization.reduce_scatter",
                         ZS_FIELD(zero_optimization.reduce_scatter),
                         "stages 2 and 3: reduce-scatter gradients (false: all-reduce)"));
    k->push_back(SizeKey("zero_optimization.stage3_prefetch_bucket_size",
                         ZS_FIELD(zero_optimization.stage3_prefetch_bucket_size), 0,
                         "stage 3: parameter elements being prefetched at once"));
    k->push_back(SizeKey("zero_optimization.stage3_max_live_parameters",
                         ZS_FIELD(zero_optimization.stage3_max_live_parameters), 0,
                         "stage 3: gathered parameter elements held at once"));
    k->push_back(SizeKey("zero_optimization.stage3_max_reuse_distance",
                         ZS_FIELD(zero_optimization.stage3_max_reuse_distance), 0,
                         "stage 3: keep a released unit gathered if it is used again within "
                         "this many elements"));
    k->push_back(SizeKey("zero_optimization.stage3_param_persistence_threshold",
                         ZS_FIELD(zero_optimization.stage3_param_persistence_threshold), 0,
                         "stage 3: units with fewer elements stay gathered"));
    k->push_back(BoolKey("zero_optimization.stage3_gather_16bit_weights_on_model_save",
                         ZS_FIELD(zero_optimization.stage3_gather_16bit_weights_on_model_save),
                         "stage 3: a model save gathers the sharded weights and also writes them "
                         "as one 16-bit safetensors file (Save16BitModel); old spelling "
                         "stage3_gather_fp16_weights_on_model_save"));
    k->push_back(SizeKey("zero_optimization.sub_group_size",
                         ZS_FIELD(zero_optimization.sub_group_size), 1,
                         "offload_optimizer: optimizer elements stepped at once (rounded down to "
                         "a multiple of 65536, at least 65536); no effect without offload"));
    for (KeyDecl& key : OffloadKeys("zero_optimization.offload_optimizer", false)) {
      k->push_back(std::move(key));
    }
    for (KeyDecl& key : OffloadKeys("zero_optimization.offload_param", true)) {
      k->push_back(std::move(key));
    }
    // aio.
    k->push_back(SizeKey("aio.block_size", ZS_FIELD(aio.block_size), 1,
                         "bytes per asynchronous I/O request"));
    k->push_back(IntKey("aio.queue_depth", ZS_FIELD(aio.queue_depth), 1, kNoMax,
                        "asynchronous I/O requests in flight"));
    k->push_back(IntKey("aio.intra_op_parallelism", ZS_FIELD(aio.intra_op_parallelism), 1, kNoMax,
                        "threads per I/O operation"));
    k->push_back(BoolKey("aio.single_submit", ZS_FIELD(aio.single_submit),
                         "submit requests one at a time instead of in batches"));
    k->push_back(BoolKey("aio.overlap_events", ZS_FIELD(aio.overlap_events),
                         "overlap submitting requests with waiting for completions"));
    // fp16 / bf16.
    k->push_back(BoolKey("fp16.enabled", ZS_FIELD(fp16.enabled),
                         "train in fp16 with loss scaling (not with bf16.enabled)"));
    k->push_back(NumberKey("fp16.loss_scale", ZS_FIELD(fp16.loss_scale), {0.0, true},
                           "0 = dynamic loss scaling; > 0 = this static scale"));
    k->push_back(IntKey("fp16.initial_scale_power", ZS_FIELD(fp16.initial_scale_power), 0, 63,
                        "dynamic scaling starts at 2^power"));
    k->push_back(IntKey("fp16.loss_scale_window", ZS_FIELD(fp16.loss_scale_window), 1, kNoMax,
                        "steps without overflow before the dynamic scale doubles"));
    k->push_back(IntKey("fp16.hysteresis", ZS_FIELD(fp16.hysteresis), 1, kNoMax,
                        "overflows tolerated before the dynamic scale halves"));
    k->push_back(NumberKey("fp16.min_loss_scale", ZS_FIELD(fp16.min_loss_scale), {0.0, false},
                           "the dynamic scale never falls below this"));
    k->push_back(BoolKey("bf16.enabled", ZS_FIELD(bf16.enabled),
                         "train in bf16 (no loss scaling; not with fp16.enabled)"));
    // optimizer.
    k->push_back(EnumKey("optimizer.type", ZS_FIELD(optimizer.type),
                         {{"AdamW", OptimizerType::kAdamW},
                          {"Adam", OptimizerType::kAdam},
                          {"SGD", OptimizerType::kSgd},
                          {"Adagrad", OptimizerType::kAdagrad},
                          {"Lion", OptimizerType::kLion}},
                         true,
                         "AdamW: decoupled weight decay; Adam: the same, or weight decay "
                         "added to the gradient (L2) with adam_w_mode false, as DeepSpeed; SGD "
                         "with optional (Nesterov) momentum; Adagrad; Lion"));
    k->push_back(NumberKey("optimizer.params.lr", ZS_FIELD(optimizer.lr), {0.0, false},
                           "learning rate (the scheduler's base when scheduler.type is none)"));
    k->push_back(BetasKey());
    k->push_back(NumberKey("optimizer.params.eps", ZS_FIELD(optimizer.eps), {0.0, false},
                           "added to the denominator for numerical stability"));
    k->push_back(NumberKey("optimizer.params.weight_decay", ZS_FIELD(optimizer.weight_decay),
                           {0.0, true},
                           "weight decay, applied only to parameters whose spec asks for it "
                           "(DeepSpeed's default 0; 0.01 with torch_adam and AdamW, as torch)"));
    k->push_back(BoolKey("optimizer.params.adam_w_mode", ZS_FIELD(optimizer.adam_w_mode),
                         "Adam: decoupled weight decay (true, DeepSpeed's default) or L2 "
                         "(false); AdamW always decouples"));
    k->push_back(BoolKey("optimizer.params.torch_adam", ZS_FIELD(optimizer.torch_adam),
                         "Adam, AdamW: DeepSpeed's choice of torch's implementation; the same "
                         "update here (weight_decay then defaults to torch AdamW's 0.01)"));
    k->push_back(BoolKey("optimizer.params.bias_correction",
                         ZS_FIELD(optimizer.bias_correction),
                         "Adam, AdamW: Adam's bias correction (false: not implemented)"));
    k->push_back(NumberKey("optimizer.params.momentum", ZS_FIELD(optimizer.momentum),
                           {0.0, true, 1.0, false}, "SGD: momentum factor (0 = plain SGD)"));
    k->push_back(BoolKey("optimizer.params.nesterov", ZS_FIELD(optimizer.nesterov),
                         "SGD: Nesterov momentum (needs momentum > 0)"));
    k->push_back(NumberKey("optimizer.params.initial_accumulator_value",
                           ZS_FIELD(optimizer.initial_accumulator_value), {0.0, true},
                           "Adagrad: the starting value of the sum of squared gradients"));
    // scheduler: DeepSpeed's classes and parameters (optimizers/lr_schedule.h).
    k->push_back(EnumKey("scheduler.type", ZS_FIELD(scheduler.type),
                         {{"none", SchedulerType::kNone},
                          {"WarmupLR", SchedulerType::kWarmupLR},
                          {"WarmupDecayLR", SchedulerType::kWarmupDecayLR},
                          {"WarmupCosineLR", SchedulerType::kWarmupCosineLR},
                          {"OneCycle", SchedulerType::kOneCycle},
                          {"LRRangeTest", SchedulerType::kLRRangeTest}},
                         false, "learning-rate schedule, as DeepSpeed's (optimizers/lr_schedule.h)"));
    k->push_back(NumberKey("scheduler.params.warmup_min_lr", ZS_FIELD(scheduler.warmup_min_lr),
                           {0.0, true}, "WarmupLR, WarmupDecayLR: learning rate at the start"));
    k->push_back(OptionalNumberKey("scheduler.params.warmup_max_lr",
                                   ZS_FIELD(scheduler.warmup_max_lr), {0.0, true},
                                   "WarmupLR, WarmupDecayLR: learning rate at the end of the "
                                   "warm-up (null: optimizer.params.lr)"));
    k->push_back(IntKey("scheduler.params.warmup_num_steps", ZS_FIELD(scheduler.warmup_num_steps),
                        1, kNoMax, "steps of warm-up (DeepSpeed uses at least 2)"));
    k->push_back(EnumKey("scheduler.params.warmup_type", ZS_FIELD(scheduler.warmup_type),
                         {{"log", WarmupType::kLog}, {"linear", WarmupType::kLinear}}, false,
                         "WarmupLR, WarmupDecayLR, WarmupCosineLR: the warm-up's curve"));
    k->push_back(IntKey("scheduler.params.total_num_steps", ZS_FIELD(scheduler.total_num_steps), 1,
                        kNoMax,
                        "WarmupDecayLR, WarmupCosineLR (required): the step where the decay "
                        "ends"));
    k->push_back(NumberKey("scheduler.params.warmup_min_ratio",
                           ZS_FIELD(scheduler.warmup_min_ratio), {0.0, true, 1.0, true},
                           "WarmupCosineLR: starting learning rate over optimizer.params.lr"));
    k->push_back(NumberKey("scheduler.params.cos_min_ratio", ZS_FIELD(scheduler.cos_min_ratio),
                           {0.0, true, 1.0, true},
                           "WarmupCosineLR: final learning rate over optimizer.params.lr"));
    k->push_back(NumberKey("scheduler.params.cycle_min_lr", ZS_FIELD(scheduler.cycle_min_lr),
                           {0.0, true}, "OneCycle (required): the cycle's lowest learning rate"));
    k->push_back(NumberKey("scheduler.params.cycle_max_lr", ZS_FIELD(scheduler.cycle_max_lr),
                           {0.0, true}, "OneCycle (required): the cycle's highest learning rate"));
    k->push_back(NumberKey("scheduler.params.decay_lr_rate", ZS_FIELD(scheduler.decay_lr_rate),
                           {0.0, true}, "OneCycle: learning-rate decay after the cycle"));
    k->push_back(NumberKey("scheduler.params.cycle_first_step_size",
                           ZS_FIELD(scheduler.cycle_first_step_size), {0.0, false},
                           "OneCycle: steps of the rising half"));
    k->push_back(OptionalNumberKey("scheduler.params.cycle_second_step_size",
                                   ZS_FIELD(scheduler.cycle_second_step_size), {0.0, true},
                                   "OneCycle: steps of the falling half (null: "
                                   "cycle_first_step_size)"));
    k->push_back(IntKey("scheduler.params.cycle_first_stair_count",
                        ZS_FIELD(scheduler.cycle_first_stair_count), 0, kNoMax,
                        "OneCycle: stairs of the rising half (0: continuous)"));
    k->push_back(OptionalIntKey("scheduler.params.cycle_second_stair_count",
                                ZS_FIELD(scheduler.cycle_second_stair_count), 0,
                                "OneCycle: stairs of the falling half (null: "
                                "cycle_first_stair_count)"));
    k->push_back(NumberKey("scheduler.params.decay_step_size", ZS_FIELD(scheduler.decay_step_size),
                           {0.0, true}, "OneCycle: steps per decay interval (0: no decay)"));
    k->push_back(BoolKey("scheduler.params.cycle_momentum", ZS_FIELD(scheduler.cycle_momentum),
                         "OneCycle: cycle beta1 against the learning rate, beta2 set to 0.99 "
                         "(optimizers with betas)"));
    k->push_back(NumberKey("scheduler.params.cycle_min_mom", ZS_FIELD(scheduler.cycle_min_mom),
                           {0.0, true, 1.0, false}, "OneCycle: lowest beta1"));
    k->push_back(NumberKey("scheduler.params.cycle_max_mom", ZS_FIELD(scheduler.cycle_max_mom),
                           {0.0, true, 1.0, false}, "OneCycle: highest beta1"));
    k->push_back(NumberKey("scheduler.params.decay_mom_rate", ZS_FIELD(scheduler.decay_mom_rate),
                           {0.0, true}, "OneCycle: beta1 growth after the cycle"));
    k->push_back(NumberKey("scheduler.params.lr_range_test_min_lr",
                           ZS_FIELD(scheduler.lr_range_test_min_lr), {0.0, false},
                           "LRRangeTest: the starting learning rate"));
    k->push_back(NumberKey("scheduler.params.lr_range_test_step_size",
                           ZS_FIELD(scheduler.lr_range_test_step_size), {0.0, false},
                           "LRRangeTest: steps per increase"));
    k->push_back(NumberKey("scheduler.params.lr_range_test_step_rate",
                           ZS_FIELD(scheduler.lr_range_test_step_rate), {0.0, true},
                           "LRRangeTest: increase per step_size steps, as a multiple of the "
                           "starting learning rate"));
    k->push_back(BoolKey("scheduler.params.lr_range_test_staircase",
                         ZS_FIELD(scheduler.lr_range_test_staircase),
                         "LRRangeTest: increase in stairs instead of continuously"));
    k->push_back(IntKey("scheduler.params.last_batch_iteration",
                        ZS_FIELD(scheduler.last_batch_iteration), -1, -1,
                        "DeepSpeed's resume position: only -1 (not implemented otherwise; a "
                        "resumed run restores the step, which positions the schedule)"));
    k->back().info.allowed = "-1 (other values: not implemented)";
    // zerostack.
    k->push_back(IntKey("zerostack.comm_timeout_ms", ZS_FIELD(zerostack.comm_timeout_ms), 1, kNoMax,
                        "deadline of every collective, in milliseconds"));
    k->push_back(IntKey("zerostack.max_inflight_buckets", ZS_FIELD(zerostack.max_inflight_buckets),
                        1, kNoMax, "gradient buckets being reduced at once (buffers held)"));
    k->push_back(IntKey("zerostack.alignment", ZS_FIELD(zerostack.alignment), 1, 4096,
                        "shard alignment in elements (vector width)"));
    k->back().info.allowed = "a power of two, 1 to 4096";
    k->push_back(BoolKey("zerostack.prefetch", ZS_FIELD(zerostack.prefetch),
                         "stage 3: prefetch parameters from the recorded module order"));
    k->push_back(EnumKey("zerostack.optimizer_state_dtype",
                         ZS_FIELD(zerostack.optimizer_state_dtype),
                         {{"fp32", OptimizerStateType::kF32},
                          {"bf16", OptimizerStateType::kBF16},
                          {"int8", OptimizerStateType::kInt8}},
                         false,
                         "optimizer states: fp32; bf16 with stochastic rounding; int8 in blocks of "
                         "256 with one fp32 scale each"));
    k->push_back(IntKey("zerostack.optimizer_threads", ZS_FIELD(zerostack.optimizer_threads), 1,
                        256, "threads of each rank's CPU optimizer step"));
    k->push_back(IntKey("zerostack.optimizer_prefetch", ZS_FIELD(zerostack.optimizer_prefetch), -1,
                        kMaxOptimizerPrefetch,
                        "how many elements ahead the CPU optimizer step prefetches its inputs: "
                        "-1 auto (256 on Intel CPUs, else none), 0 none"));
    k->back().info.allowed =
        fmt::format("-1 (auto), 0 (none), or 1 to {} elements", kMaxOptimizerPrefetch);
    k->push_back(IntKey("zerostack.optimizer_cache_resident_bytes",
                        ZS_FIELD(zerostack.optimizer_cache_resident_bytes), -1, kNoMax,
                        "the largest optimizer working set per rank (master, gradients, states, "
                        "parameter copy) treated as cache-resident: beyond it the CPU step writes "
                        "the parameter copy through non-temporal stores; -1 auto (a quarter of "
                        "the last-level cache in sysfs), else bytes (0: always beyond)",
                        "size"));
    k->back().info.allowed = "-1 (auto), or 0 and up (bytes)";
    k->push_back(BoolKey("zerostack.pin_memory_fallback", ZS_FIELD(zerostack.pin_memory_fallback),
                         "offload with pin_memory where ulimit -l is too low: false, an error "
                         "naming the limit; true, pageable host memory instead, logged once"));
    k->push_back(BoolKey("zerostack.allow_unused_units", ZS_FIELD(zerostack.allow_unused_units),
                         "let a micro-batch leave units out (conditional computation, e.g. "
                         "experts): their gradient of that micro-batch is zero, agreed across "
                         "ranks; false, Step() fails naming the unit not run"));
    k->push_back(ParamGroupsKey());
    // Defaults come from a default-built config.
    const EngineConfig defaults;
    for (KeyDecl& key : *k) {
      if (key.write) key.info.default_json = key.write(defaults).dump();
    }
    return k;
  }();
  return *keys;
}

#undef ZS_FIELD

const KeyDecl* FindKey(const std::string& path) {
  for (const KeyDecl& key : Keys()) {
    if (key.info.path == path) return &key;
  }
  return nullptr;
}

bool IsSection(const std::string& path) {
  return std::find(std::begin(kSections), std::end(kSections), path) != std::end(kSections);
}

std::string LastComponent(const std::string& path) {
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// The known key or section closest to an unknown path, or "" if none is close. Only a near
// miss is suggested, never another concept: the same name in another section ("lr" ->
// "optimizer.params.lr"), or within the same section a name a few typos away (at most a
// quarter of its letters, at least 1) or the unknown name's longer or shorter form by at most
// 5 letters ("stage3_prefetch_bucket" -> "stage3_prefetch_bucket_size"; "offload" is not
// "offload_optimizer", it may be "offload_param").
std::string ClosestKnown(const std::string& path) {
  std::vector<std::string> known(std::begin(kSections), std::end(kSections));
  for (const KeyDecl& key : Keys()) known.push_back(key.info.path);
  const std::string last = LastComponent(path);
  for (const std::string& k : known) {
    if (k != path && LastComponent(k) == last) return k;
  }
  auto section = [](const std::string& p) {
    size_t dot = p.rfind('.');
    return dot == std::string::npos ? std::string() : p.substr(0, dot);
  };
  std::string best;
  size_t best_distance = std::max<size_t>(1, last.size() / 4) + 1;
  for (const std::string& k : known) {
    if (section(k) != section(path)) continue;
    const std::string name = LastComponent(k);
    const size_t shorter = std::min(name.size(), last.size());
    const size_t longer = std::max(name.size(), last.size());
    const bool prefix = shorter >= 6 && longer - shorter <= 5 &&
                        (name.starts_with(last) || last.starts_with(name));
    const size_t d = prefix ? 0 : EditDistance(last, name);
    if (d < best_distance) {
      best_distance = d;
      best = k;
    }
  }
  return best;
}

constexpr const char* kOld16BitSaveKey = "stage3_gather_fp16_weights_on_model_save";

Status ReadSection(const Json& object, const std::string& path, const std::string& shown_path,
                   EngineConfig& config) {
  for (const auto& [name, value] : object.items()) {
    std::string key_path = path.empty() ? name : path + "." + name;
    std::string shown = shown_path.empty() ? name : shown_path + "." + name;
    if (path.empty() && name == "bfloat16") key_path = "bf16";  // DeepSpeed's alias
    if (path == "zero_optimization" && name == kOld16BitSaveKey) {  // DeepSpeed's old spelling
      key_path = "zero_optimization.stage3_gather_16bit_weights_on_model_save";
    }
    const KeyDecl* key = FindKey(key_path);
    if (key == nullptr && !IsSection(key_path)) {
      std::string closest = ClosestKnown(key_path);
      return InvalidArgumentError(
          closest.empty()
              ? fmt::format("unknown key \"{}\"", shown)
              : fmt::format("unknown key \"{}\"; did you mean \"{}\"?", shown, closest));
    }
    if (value.is_string() && value.get<std::string>() == "auto") {
      return InvalidArgumentError(fmt::format(
          "{}: \"auto\" is not supported; zerostack needs an explicit value (allowed: {})", shown,
          key != nullptr ? key->info.allowed : "an object"));
    }
    if (key == nullptr) {  // a section
      if (!value.is_object()) {
        return InvalidArgumentError(
            fmt::format("{}: expected an object (a section of keys), {}", shown, Got(value)));
      }
      ZS_RETURN_IF_ERROR(ReadSection(value, key_path, shown, config));
      continue;
    }
    if (std::optional<std::string> error = key->read(value, config)) {
      return InvalidArgumentError(
          fmt::format("{}: {}; allowed: {}", shown, *error, key->info.allowed));
    }
  }
  return OkStatus();
}

// nlohmann::json keeps the last of two equal keys; DeepSpeed rejects them, and so do we. Finds
// the first repeated key (by its path) while parsing.
class DuplicateKeyFinder {
 public:
  bool operator()(int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start: {
        std::string path;
        if (!frames_.empty()) {
          const Frame& parent = frames_.back();
          path = parent.path.empty() ? parent.last_key : parent.path + "." + parent.last_key;
        }
        frames_.push_back({std::move(path), {}, {}});
        break;
      }
      case Json::parse_event_t::key: {
        Frame& frame = frames_.back();
        frame.last_key = parsed.get<std::string>();
        if (!frame.keys.insert(frame.last_key).second && duplicate_->empty()) {
          *duplicate_ = frame.path.empty() ? frame.last_key : frame.path + "." + frame.last_key;
        }
        break;
      }
      case Json::parse_event_t::object_end:
        if (!frames_.empty()) frames_.pop_back();
        break;
      default:
        break;
    }
    return true;
  }
  explicit DuplicateKeyFinder(std::string* duplicate) : duplicate_(duplicate) {}

 private:
  struct Frame {
    std::string path;
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Frame> frames_;
  std::string* duplicate_;
};

// DeepSpeed with torch_adam builds torch.optim.AdamW (for "AdamW", or "Adam" in adam_w_mode)
// from the given params, so an absent weight_decay takes torch's default, 0.01, not the fused
// Adam's 0.
void ApplyTorchAdamDefaults(const Json& root, EngineConfig& config) {
  const OptimizerConfig& o = config.optimizer;
  const bool torch_adamw = o.torch_adam && (o.type == OptimizerType::kAdamW ||
                                            (o.type == OptimizerType::kAdam && o.adam_w_mode));
  if (!torch_adamw) return;
  const Json::json_pointer given("/optimizer/params/weight_decay");
  if (!root.contains(given)) config.optimizer.weight_decay = 0.01;
}

std::string SchedulerTypeName(SchedulerType type) {
  for (const KeyDecl& key : Keys()) {
    if (key.info.path == "scheduler.type") {
      EngineConfig c;
      c.scheduler.type = type;
      return key.write(c).get<std::string>();
    }
  }
  return "?";
}

// [Note: one class, its parameters] DeepSpeed passes scheduler.params to the class's
// constructor as keyword arguments, so a parameter of another class is refused there and a
// required one must be given; the same here, before any default could stand in for it.
Status CheckSchedulerParams(const Json& root, SchedulerType type) {
  const auto scheduler = root.find("scheduler");
  if (scheduler == root.end() || !scheduler->is_object()) return OkStatus();
  const std::vector<std::string>& names = SchedulerParamNames(type);
  const auto params = scheduler->find("params");
  std::set<std::string> given;
  if (params != scheduler->end() && params->is_object()) {
    for (const auto& [name, value] : params->items()) {
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        return InvalidArgumentError(fmt::format(
            "scheduler.params.{}: not a parameter of scheduler.type \"{}\"; it takes {}", name,
            SchedulerTypeName(type),
            names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "))));
      }
      given.insert(name);
    }
  }
  for (const std::string& name : SchedulerRequiredParams(type)) {
    if (given.count(name) == 0) {
      return InvalidArgumentError(fmt::format(
          "scheduler.params.{}: required by scheduler.type \"{}\" (DeepSpeed has no default "
          "for it)", name, SchedulerTypeName(type)));
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<EngineConfig> ParseEngineConfig(std::string_view json_text) {
  return ParseEngineConfig(json_text, ProgramValues{}, nullptr);
}

StatusOr<EngineConfig> ParseEngineConfig(std::string_view json_text, const ProgramValues& program,
                                         std::vector<AutoFill>* filled) {
  ZS_RETURN_IF_ERROR(internal::CheckNoNul(json_text));
  ZS_RETURN_IF_ERROR(internal::CheckNesting(json_text));
  Json root;
  std::string duplicate;
  try {
    root = Json::parse(json_text.begin(), json_text.end(), DuplicateKeyFinder(&duplicate));
  } catch (const Json::exception& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line 3, column 7: ..."
    // e.what() quotes the last token read, which can be the whole of a long one: bounded.
    std::string what = e.what();
    if (what.size() > 300) what = what.substr(0, 297) + "...";
    return InvalidArgumentError(fmt::format("malformed JSON: {}", what));
  }
  if (!duplicate.empty()) {
    return InvalidArgumentError(fmt::format("key \"{}\" is given more than once", duplicate));
  }
  if (!root.is_object()) {
    return InvalidArgumentError(
        fmt::format("a config must be a JSON object of keys, {}", Got(root)));
  }
  if (root.contains("bf16") && root.contains("bfloat16")) {
    return InvalidArgumentError(
        "both \"bf16\" and its alias \"bfloat16\" are given; use one of them");
  }
  if (const auto zero = root.find("zero_optimization");
      zero != root.end() && zero->is_object() && zero->contains(kOld16BitSaveKey) &&
      zero->contains("stage3_gather_16bit_weights_on_model_save")) {
    return InvalidArgumentError(
        "both \"zero_optimization.stage3_gather_16bit_weights_on_model_save\" and its old "
        "spelling \"zero_optimization.stage3_gather_fp16_weights_on_model_save\" are given; use "
        "one of them");
  }
  ZS_RETURN_IF_ERROR(internal::ApplyDeepSpeedFeatures(root));
  std::vector<AutoFill> fills;
  ZS_RETURN_IF_ERROR(internal::ResolveAutoValues(root, program, &fills));
  if (filled != nullptr) *filled = fills;
  EngineConfig config;
  if (Status read = ReadSection(root, "", "", config); !read.ok()) {
    // A value an "auto" became and the key refuses: say where it came from.
    for (const AutoFill& f : fills) {
      if (read.message().starts_with(f.key + ":")) {
        auto flag = program.flags.find(f.from);
        return read.WithContext(fmt::format(
            "\"auto\" {} became {} from the program's {}{}", f.key, f.value, f.from,
            flag != program.flags.end() ? fmt::format(" ({})", flag->second) : std::string()));
      }
    }
    return read;
  }
  ZS_RETURN_IF_ERROR(CheckSchedulerParams(root, config.scheduler.type));
  ApplyTorchAdamDefaults(root, config);
  config.batch_keys_given.micro_batch = root.contains("train_micro_batch_size_per_gpu");
  config.batch_keys_given.accumulation_steps = root.contains("gradient_accumulation_steps");
  ZS_RETURN_IF_ERROR(config.Validate());
  return config;
}

StatusOr<EngineConfig> LoadEngineConfig(const std::string& path) {
  return LoadEngineConfig(path, ProgramValues{}, nullptr);
}

StatusOr<EngineConfig> LoadEngineConfig(const std::string& path, const ProgramValues& program,
                                        std::vector<AutoFill>* filled) {
  std::error_code ec;
  std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found) {
    return NotFoundError(fmt::format("config file {}: no such file", path));
  }
  if (ec) return IoError(fmt::format("config file {}: {}", path, ec.message()));
  if (std::filesystem::is_directory(st)) {
    return InvalidArgumentError(fmt::format("config file {}: is a directory", path));
  }
  // [Note: bounded input] A regular file of bounded size: a device (/dev/zero) or a pipe
  // would be read without end.
  if (!std::filesystem::is_regular_file(st)) {
    return InvalidArgumentError(
        fmt::format("config file {}: not a regular file (a device, pipe or socket)", path));
  }
  constexpr uintmax_t kMaxConfigBytes = uintmax_t{16} << 20;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxConfigBytes) {
    return InvalidArgumentError(fmt::format(
        "config file {}: {} bytes; a config is at most {} bytes", path, size, kMaxConfigBytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return IoError(
        fmt::format("config file {}: cannot open for reading: {}", path, std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return IoError(fmt::format("config file {}: read failed", path));
  StatusOr<EngineConfig> config = ParseEngineConfig(text.str(), program, filled);
  if (!config.ok()) return config.status().WithContext(fmt::format("config file {}", path));
  return config;
}

std::string EngineConfigToJson(const EngineConfig& config) {
  Json out = Json::object();
  const std::vector<std::string>& scheduler_params = SchedulerParamNames(config.scheduler.type);
  for (const KeyDecl& key : Keys()) {
    if (!key.write) continue;
    // Only the scheduler type's own parameters ([Note: one class, its parameters]).
    constexpr std::string_view kParams = "scheduler.params.";
    if (key.info.path.starts_with(kParams) &&
        std::find(scheduler_params.begin(), scheduler_params.end(),
                  key.info.path.substr(kParams.size())) == scheduler_params.end()) {
      continue;
    }
    const Json value = key.write(config);
    if (value.is_null()) continue;  // an unset optional key
    std::string pointer = "/" + key.info.path;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    out[Json::json_pointer(pointer)] = value;
  }
  return out.dump(2);
}

std::vector<ConfigKeyInfo> EngineConfigKeys() {
  std::vector<ConfigKeyInfo> infos;
  for (const KeyDecl& key : Keys()) infos.push_back(key.info);
  return infos;
}

std::vector<DeepSpeedKeyInfo> DeepSpeedKeys() {
  std::vector<DeepSpeedKeyInfo> keys = internal::DeepSpeedKeysOutsideTheTable();
  for (const KeyDecl& key : Keys()) {
    if (key.info.path.starts_with("zerostack.")) continue;  // zerostack's own
    keys.push_back({key.info.path,
                    key.info.ignored ? DeepSpeedKeyKind::kNoEffect : DeepSpeedKeyKind::kRead});
  }
  std::sort(keys.begin(), keys.end(),
            [](const DeepSpeedKeyInfo& a, const DeepSpeedKeyInfo& b) { return a.path < b.path; });
  return keys;
}

}  // namespace zs
