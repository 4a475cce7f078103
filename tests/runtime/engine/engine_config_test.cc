#include "runtime/engine/engine_config.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <set>
#include <string>

namespace zs {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// The error of parsing `text`; fails the test if the parse succeeds.
Status ParseError(const std::string& text) {
  StatusOr<EngineConfig> c = ParseEngineConfig(text);
  EXPECT_FALSE(c.ok()) << "parsed without error: " << text;
  return c.status();
}

// Expects the parse of `text` to fail with InvalidArgument and a message holding every part.
void ExpectInvalid(const std::string& text, std::initializer_list<std::string> parts) {
  Status s = ParseError(text);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  for (const std::string& part : parts) {
    EXPECT_THAT(s.message(), HasSubstr(part)) << "config: " << text;
  }
}

TEST(EngineConfigTest, EmptyObjectGivesTheDefaults) {
  StatusOr<EngineConfig> c = ParseEngineConfig("{}");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c, EngineConfig{});
  EXPECT_EQ(c->zero_optimization.stage, 0);
  EXPECT_EQ(c->zero_optimization.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(c->zero_optimization.stage3_prefetch_bucket_size, 50'000'000);
  EXPECT_EQ(c->zero_optimization.offload_param.device, OffloadDevice::kNone);
  EXPECT_EQ(c->optimizer.type, OptimizerType::kAdamW);
  EXPECT_DOUBLE_EQ(c->optimizer.lr, 1e-3);
  EXPECT_EQ(c->scheduler.type, SchedulerType::kNone);
  EXPECT_EQ(c->train_micro_batch_size_per_gpu, 1);
  EXPECT_EQ(c->gradient_accumulation_steps, 1);
  EXPECT_FALSE(c->fp16.enabled);
  EXPECT_FALSE(c->bf16.enabled);
}

// A config in DeepSpeed's own shape, as a user would bring it.
constexpr const char* kDeepSpeedExample = R"({
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 2,
  "gradient_clipping": 1.0,
  "steps_per_print": 100,
  "wall_clock_breakdown": false,
  "bf16": {"enabled": true},
  "zero_optimization": {
    "stage": 3,
    "overlap_comm": true,
    "contiguous_gradients": true,
    "reduce_bucket_size": 5e8,
    "allgather_bucket_size": 2e8,
    "stage3_prefetch_bucket_size": 5e7,
    "stage3_max_live_parameters": 1e9,
    "stage3_max_reuse_distance": 1e9,
    "stage3_param_persistence_threshold": 1e5,
    "offload_optimizer": {"device": "none", "pin_memory": true},
    "offload_param": {"device": "none"}
  },
  "aio": {"block_size": 1048576, "queue_depth": 16, "intra_op_parallelism": 2,
          "single_submit": false, "overlap_events": true},
  "optimizer": {"type": "adamw",
                "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-6, "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupCosineLR",
                "params": {"total_num_steps": 5000, "warmup_min_ratio": 0.01,
                           "warmup_num_steps": 200, "cos_min_ratio": 0.1,
                           "warmup_type": "linear"}},
  "zerostack": {"comm_timeout_ms": 30000, "max_inflight_buckets": 3, "alignment": 64,
                "prefetch": false, "optimizer_state_dtype": "bf16", "optimizer_threads": 2,
                "optimizer_prefetch": 512, "optimizer_cache_resident_bytes": 8388608}
})";

TEST(EngineConfigTest, DeepSpeedExampleParses) {
  StatusOr<EngineConfig> parsed = ParseEngineConfig(kDeepSpeedExample);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const EngineConfig& c = *parsed;
  EXPECT_EQ(c.train_batch_size, 64);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 2);
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.steps_per_print, 100);
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_FALSE(c.fp16.enabled);
  const ZeroConfig& z = c.zero_optimization;
  EXPECT_EQ(z.stage, 3);
  EXPECT_TRUE(z.overlap_comm);
  EXPECT_TRUE(z.contiguous_gradients);
  EXPECT_EQ(z.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(z.allgather_bucket_size, 200'000'000);
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 50'000'000);
  EXPECT_EQ(z.stage3_max_live_parameters, 1'000'000'000);
  EXPECT_EQ(z.stage3_max_reuse_distance, 1'000'000'000);
  EXPECT_EQ(z.stage3_param_persistence_threshold, 100'000);
  EXPECT_EQ(z.offload_optimizer.device, OffloadDevice::kNone);
  EXPECT_TRUE(z.offload_optimizer.pin_memory);
  EXPECT_EQ(z.offload_param.device, OffloadDevice::kNone);
  EXPECT_EQ(c.aio.queue_depth, 16);
  EXPECT_EQ(c.aio.intra_op_parallelism, 2);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.optimizer.betas[0], 0.9);
  EXPECT_EQ(c.optimizer.betas[1], 0.95);
  EXPECT_EQ(c.optimizer.eps, 1e-6);
  EXPECT_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kWarmupCosineLR);
  EXPECT_EQ(c.scheduler.warmup_min_ratio, 0.01);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 200);
  EXPECT_EQ(c.scheduler.total_num_steps, 5000);
  EXPECT_EQ(c.scheduler.cos_min_ratio, 0.1);
  EXPECT_EQ(c.scheduler.warmup_type, WarmupType::kLinear);
  EXPECT_EQ(c.zerostack.comm_timeout_ms, 30000);
  EXPECT_EQ(c.zerostack.max_inflight_buckets, 3);
  EXPECT_EQ(c.zerostack.alignment, 64);
  EXPECT_FALSE(c.zerostack.prefetch);
  EXPECT_EQ(c.zerostack.optimizer_state_dtype, OptimizerStateType::kBF16);
  EXPECT_EQ(c.zerostack.optimizer_threads, 2);
  EXPECT_EQ(c.zerostack.optimizer_prefetch, 512);
  EXPECT_EQ(c.zerostack.optimizer_cache_resident_bytes, 8388608);
  // Keys not given keep their defaults.
  EXPECT_EQ(z.reduce_scatter, ZeroConfig{}.reduce_scatter);
  EXPECT_EQ(c.fp16.loss_scale_window, Fp16Config{}.loss_scale_window);
  EXPECT_TRUE(c.ValidateForWorld(8).ok());
}

TEST(EngineConfigTest, OptimizerTypeIsCaseInsensitive) {
  for (const char* name : {"Adam", "adam", "ADAM"}) {
    StatusOr<EngineConfig> c =
        ParseEngineConfig(std::string(R"({"optimizer": {"type": ")") + name + "\"}}");
    ASSERT_TRUE(c.ok()) << name << ": " << c.status().ToString();
    EXPECT_EQ(c->optimizer.type, OptimizerType::kAdam);
  }
  ExpectInvalid(R"({"optimizer": {"type": "Lamb"}})",
                {"optimizer.type", "\"Lamb\"", "AdamW, Adam"});
}

// DeepSpeed's Adam keys: adam_w_mode, torch_adam (and torch AdamW's weight-decay default),
// bias_correction; the default weight decay is DeepSpeed's 0.
TEST(EngineConfigTest, AdamKeysMeanWhatTheyMeanInDeepSpeed) {
  StatusOr<EngineConfig> c = ParseEngineConfig(R"({"optimizer": {"type": "Adam"}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->optimizer.adam_w_mode);
  EXPECT_EQ(c->optimizer.weight_decay, 0.0);
  c = ParseEngineConfig(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false,
                            "bias_correction": true}}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->optimizer.adam_w_mode);
  for (const char* text :
       {R"({"optimizer": {"type": "AdamW", "params": {"torch_adam": true}}})",
        R"({"optimizer": {"type": "Adam", "params": {"torch_adam": true}}})"}) {
    c = ParseEngineConfig(text);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->optimizer.weight_decay, 0.01) << text;  // torch.optim.AdamW's default
  }
  c = ParseEngineConfig(R"({"optimizer": {"type": "Adam", "params": {"torch_adam": true,
                            "adam_w_mode": false}}})");  // torch.optim.Adam: 0
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->optimizer.weight_decay, 0.0);
  c = ParseEngineConfig(R"({"optimizer": {"type": "AdamW", "params": {"torch_adam": true,
                            "weight_decay": 0.2}}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->optimizer.weight_decay, 0.2);
  ExpectInvalid(R"({"optimizer": {"type": "Adam", "params": {"bias_correction": false}}})",
                {"optimizer.params.bias_correction", "not implemented"});
  ExpectInvalid(R"({"optimizer": {"type": "SGD", "params": {"adam_w_mode": false}}})",
                {"optimizer.params.adam_w_mode", "Adam and AdamW only"});
}

TEST(EngineConfigTest, Bfloat16IsAnAliasOfBf16) {
  StatusOr<EngineConfig> c = ParseEngineConfig(R"({"bfloat16": {"enabled": true}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->bf16.enabled);
  ExpectInvalid(R"({"bfloat16": {"enabled": 1}})", {"bfloat16.enabled", "boolean"});
  ExpectInvalid(R"({"bf16": {"enabled": true}, "bfloat16": {"enabled": true}})",
                {"bf16", "bfloat16"});
}

TEST(EngineConfigTest, IgnoredDeepSpeedKeysMustStillBeBooleans) {
  EXPECT_TRUE(ParseEngineConfig(R"({"zero_allow_untested_optimizer": true})").ok());
  ExpectInvalid(R"({"wall_clock_breakdown": "no"})", {"wall_clock_breakdown", "boolean"});
}

// [Note: DeepSpeed's other keys]: monitoring accepted, features not built refused by name
// (unless off), the old offload spellings mapped.
TEST(EngineConfigTest, DeepSpeedKeysAreAcceptedOrNamedNotImplemented) {
  StatusOr<EngineConfig> c = ParseEngineConfig(R"({
      "tensorboard": {"enabled": true, "output_path": "logs/", "job_name": "x"},
      "wandb": {"enabled": false}, "flops_profiler": {"enabled": true, "profile_step": 1},
      "prescale_gradients": false, "gradient_predivide_factor": 1.0, "memory_breakdown": false,
      "activation_checkpointing": null, "sparse_gradients": false,
      "communication_data_type": "fp32", "gradient_allreduce_op": "mean",
      "zero_optimization": {"stage": 2, "allgather_partitions": true,
                            "round_robin_gradients": true, "zero_hpz_partition_size": 1,
                            "zero_quantized_weights": false,
                            "stage3_model_persistence_threshold": 1e9,
                            "use_multi_rank_bucket_allreduce": true,
                            "offload_optimizer": {"device": "none", "cpuadam_cores_perc": 0.8}},
      "bf16": {"enabled": false, "check_grad_overflow": false},
      "checkpoint": {"tag_validation": "Warn", "load_universal": false},
      "dataloader_drop_last": true})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->zero_optimization.stage, 2);
  for (const auto& [text, feature] : std::vector<std::pair<std::string, std::string>>{
           {R"({"activation_checkpointing": {"partition_activations": true}})",
            "activation checkpointing"},
           {R"({"zero_optimization": {"zero_quantized_gradients": true}})", "qgZ"},
           {R"({"zero_optimization": {"zero_hpz_partition_size": 8}})", "hpZ"},
           {R"({"communication_data_type": "fp16"})", "communication in another dtype"},
           {R"({"zero_optimization": {"offload_optimizer": {"device": "cpu", "ratio": 0.3}}})",
            "partial optimizer offload"},
           {R"({"sparse_attention": {"mode": "fixed"}})", "sparse attention"},
           {R"({"bf16": {"enabled": true, "check_grad_overflow": true}})",
            "skipping bf16 steps on overflow"},
           {R"({"zero_optimization": {"zenflow": {"topk_ratio": 0.1}}})", "ZenFlow"},
           {R"({"checkpoint": {"load_universal": true}})", "universal checkpoints"},
           {R"({"compile": {"deepcompile": true}})", "DeepCompile"}}) {
    Status s = ParseEngineConfig(text).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(s.message(), HasSubstr("not implemented")) << text;
    EXPECT_THAT(s.message(), HasSubstr(feature)) << text;
    EXPECT_THAT(s.message(), Not(HasSubstr("unknown key"))) << text;
  }
  ExpectInvalid(R"({"gradient_predivide_factor": 0})", {"gradient_predivide_factor", "> 0"});
  // cpu_offload (the old spelling) maps as DeepSpeed maps it.
  c = ParseEngineConfig(R"({"zero_optimization": {"stage": 2, "cpu_offload": true,
                            "cpu_offload_use_pin_memory": true}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->zero_optimization.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_TRUE(c->zero_optimization.offload_optimizer.pin_memory);
  c = ParseEngineConfig(R"({"zero_optimization": {"stage": 3, "cpu_offload_param": true}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->zero_optimization.offload_param.device, OffloadDevice::kCpu);
  EXPECT_FALSE(c->zero_optimization.offload_param.pin_memory);
  c = ParseEngineConfig(R"({"zero_optimization": {"stage": 2, "cpu_offload": false}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->zero_optimization.offload_optimizer.device, OffloadDevice::kNone);
  ExpectInvalid(R"({"zero_optimization": {"stage": 2, "cpu_offload": true,
                    "offload_optimizer": {"device": "cpu"}}})",
                {"cpu_offload", "offload_optimizer", "both"});
}

// "Did you mean" only for a near miss, never another concept.
TEST(EngineConfigTest, SuggestionsAreNearMissesOnly) {
  for (const char* text : {R"({"optimizer": {"params": {"amsgrad": true}}})",
                           R"({"zero_optimization": {"stage3_gather": true}})",
                           R"({"fp16": {"dynamic": true}})",
                           R"({"zero_optimization": {"offload": {"device": "cpu"}}})"}) {
    Status s = ParseEngineConfig(text).status();
    EXPECT_THAT(s.message(), HasSubstr("unknown key")) << text;
    EXPECT_THAT(s.message(), Not(HasSubstr("did you mean"))) << text << ": " << s.message();
  }
  ExpectInvalid(R"({"zero_optimization": {"reduce_bucket_sise": 5}})",
                {"did you mean \"zero_optimization.reduce_bucket_size\""});
}

TEST(EngineConfigTest, UnknownKeysAreErrorsWithTheClosestKnownKey) {
  ExpectInvalid(R"({"zero_optimization": {"stage3_prefetch_bucket": 5}})",
                {"unknown key \"zero_optimization.stage3_prefetch_bucket\"",
                 "did you mean \"zero_optimization.stage3_prefetch_bucket_size\""});
  ExpectInvalid(R"({"zero_optimisation": {"stage": 1}})",
                {"\"zero_optimisation\"", "did you mean \"zero_optimization\""});
  // A key in the wrong section: the same name where it belongs.
  ExpectInvalid(R"({"lr": 0.1})", {"unknown key \"lr\"", "did you mean \"optimizer.params.lr\""});
  // Nothing close: no suggestion.
  Status s = ParseError(R"({"fp16": {"completely_unrelated_knob_name": 1}})");
  EXPECT_THAT(s.message(), HasSubstr("fp16.completely_unrelated_knob_name"));
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("did you mean")));
  // DeepSpeed keys that change behaviour are not silently accepted.
  ExpectInvalid(R"({"fp16": {"enabled": true, "auto_cast": true}})", {"fp16.auto_cast"});
}

TEST(EngineConfigTest, Gather16BitWeightsOnModelSaveAndItsOldSpelling) {
  EXPECT_FALSE(ParseEngineConfig("{}")->zero_optimization.stage3_gather_16bit_weights_on_model_save);
  for (const char* key : {"stage3_gather_16bit_weights_on_model_save",
                          "stage3_gather_fp16_weights_on_model_save"}) {
    auto c = ParseEngineConfig(
        fmt::format(R"({{"zero_optimization": {{"stage": 3, "{}": true}}}})", key));
    ASSERT_TRUE(c.ok()) << key << ": " << c.status().ToString();
    EXPECT_TRUE(c->zero_optimization.stage3_gather_16bit_weights_on_model_save) << key;
  }
  ExpectInvalid(R"({"zero_optimization": {"stage3_gather_fp16_weights_on_model_save": 1}})",
                {"zero_optimization.stage3_gather_fp16_weights_on_model_save", "boolean"});
  ExpectInvalid(R"({"zero_optimization": {"stage3_gather_16bit_weights_on_model_save": true,
                                          "stage3_gather_fp16_weights_on_model_save": true}})",
                {"old spelling", "one of them"});
}

TEST(EngineConfigTest, WrongJsonTypesAreErrors) {
  ExpectInvalid(R"({"zero_optimization": {"stage": "3"}})",
                {"zero_optimization.stage", "expected an integer", "\"3\"", "0, 1, 2, 3"});
  ExpectInvalid(R"({"zero_optimization": {"overlap_comm": 1}})",
                {"zero_optimization.overlap_comm", "boolean", "true, false"});
  ExpectInvalid(R"({"fp16": {"enabled": "true"}})", {"fp16.enabled", "boolean"});
  ExpectInvalid(R"({"optimizer": {"params": {"lr": "1e-3"}}})",
                {"optimizer.params.lr", "expected a number", "> 0"});
  ExpectInvalid(R"({"zero_optimization": 3})", {"zero_optimization", "expected an object"});
  ExpectInvalid(R"({"optimizer": {"params": {"betas": [0.9]}}})",
                {"optimizer.params.betas", "two numbers"});
  ExpectInvalid(R"({"zero_optimization": {"offload_param": {"nvme_path": 7}}})",
                {"zero_optimization.offload_param.nvme_path", "expected a string"});
  ExpectInvalid("[1, 2]", {"JSON object"});
}

TEST(EngineConfigTest, OutOfRangeValuesAreErrors) {
  ExpectInvalid(R"({"zero_optimization": {"stage": 5}})",
                {"zero_optimization.stage", "5", "allowed: 0, 1, 2, 3"});
  ExpectInvalid(R"({"zero_optimization": {"reduce_bucket_size": -1}})",
                {"zero_optimization.reduce_bucket_size", "-1", ">= 1"});
  ExpectInvalid(R"({"zero_optimization": {"stage3_prefetch_bucket_size": -5e7}})",
                {"zero_optimization.stage3_prefetch_bucket_size", "-50000000", ">= 0"});
  ExpectInvalid(R"({"optimizer": {"params": {"lr": 0}}})", {"optimizer.params.lr", "> 0"});
  ExpectInvalid(R"({"optimizer": {"params": {"lr": -0.1}}})", {"optimizer.params.lr", "-0.1"});
  ExpectInvalid(R"({"optimizer": {"params": {"betas": [0.9, 1.0]}}})",
                {"optimizer.params.betas", "beta2", "[0, 1)"});
  ExpectInvalid(R"({"optimizer": {"params": {"betas": [-0.1, 0.9]}}})",
                {"optimizer.params.betas", "beta1", "-0.1"});
  ExpectInvalid(R"({"optimizer": {"params": {"eps": 0.0}}})", {"optimizer.params.eps", "> 0"});
  ExpectInvalid(R"({"gradient_accumulation_steps": 0})",
                {"gradient_accumulation_steps", "0 is out of range", ">= 1"});
  ExpectInvalid(R"({"train_micro_batch_size_per_gpu": 0})",
                {"train_micro_batch_size_per_gpu", ">= 1"});
  ExpectInvalid(R"({"gradient_clipping": -1})", {"gradient_clipping", ">= 0"});
  ExpectInvalid(R"({"zerostack": {"optimizer_prefetch": -2}})",
                {"zerostack.optimizer_prefetch", "-2 is out of range", "-1 (auto)"});
  ExpectInvalid(R"({"zerostack": {"optimizer_cache_resident_bytes": -2}})",
                {"zerostack.optimizer_cache_resident_bytes", "-2 is out of range", "-1 (auto)"});
  ExpectInvalid(R"({"scheduler": {"params": {"cos_min_ratio": 1.5}}})",
                {"scheduler.params.cos_min_ratio", "[0, 1]"});
  ExpectInvalid(R"({"zerostack": {"alignment": 24}})", {"zerostack.alignment", "24", "power"});
  // [Note: one class, its parameters]: DeepSpeed's constructors take their own keyword
  // arguments only, and have no default for some.
  ExpectInvalid(R"({"scheduler": {"type": "WarmupCosineLR",
                    "params": {"total_num_steps": 100, "warmup_max_lr": 0.01}}})",
                {"scheduler.params.warmup_max_lr", "not a parameter", "WarmupCosineLR",
                 "warmup_min_ratio"});
  ExpectInvalid(R"({"scheduler": {"type": "WarmupLR", "params": {"cos_min_ratio": 0.1}}})",
                {"scheduler.params.cos_min_ratio", "not a parameter", "\"WarmupLR\""});
  ExpectInvalid(R"({"scheduler": {"params": {"warmup_num_steps": 10}}})",
                {"scheduler.params.warmup_num_steps", "\"none\"", "takes none"});
  ExpectInvalid(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10}}})",
                {"scheduler.params.total_num_steps", "required", "WarmupDecayLR"});
  ExpectInvalid(R"({"scheduler": {"type": "WarmupCosineLR"}})",
                {"scheduler.params.total_num_steps", "required", "WarmupCosineLR"});
  ExpectInvalid(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.1}}})",
                {"scheduler.params.cycle_max_lr", "required", "OneCycle"});
  ExpectInvalid(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cubic"}}})",
                {"scheduler.params.warmup_type", "\"cubic\"", "log, linear"});
  ExpectInvalid(R"({"scheduler": {"type": "WarmupLR", "params": {"last_batch_iteration": 7}}})",
                {"scheduler.params.last_batch_iteration", "7", "not implemented"});
  ExpectInvalid(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 0}}})",
                {"scheduler.params.warmup_num_steps", ">= 1"});
}

TEST(EngineConfigTest, SizesAcceptIntegralNumbersOnly) {
  StatusOr<EngineConfig> c = ParseEngineConfig(R"({"zero_optimization":
      {"reduce_bucket_size": 5e8, "allgather_bucket_size": 123456789}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->zero_optimization.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(c->zero_optimization.allgather_bucket_size, 123'456'789);
  ExpectInvalid(R"({"zero_optimization": {"reduce_bucket_size": 1.5}})",
                {"zero_optimization.reduce_bucket_size", "non-integral", "1.5"});
  ExpectInvalid(R"({"zero_optimization": {"reduce_bucket_size": 1e30}})",
                {"zero_optimization.reduce_bucket_size", "64-bit"});
  ExpectInvalid(R"({"zero_optimization": {"reduce_bucket_size": 18446744073709551615}})",
                {"zero_optimization.reduce_bucket_size", "64-bit"});
}

TEST(EngineConfigTest, EnumValuesOutsideTheirListAreErrors) {
  ExpectInvalid(R"({"zero_optimization": {"offload_optimizer": {"device": "gpu"}}})",
                {"zero_optimization.offload_optimizer.device", "\"gpu\"", "none, cpu, nvme"});
  ExpectInvalid(R"({"scheduler": {"type": "CyclicLR"}})",
                {"scheduler.type", "\"CyclicLR\"",
                 "none, WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest"});
}

// Without the program's values an "auto" is an error naming what would resolve it.
TEST(EngineConfigTest, AutoWithoutProgramValuesNamesWhatResolvesIt) {
  ExpectInvalid(R"({"train_micro_batch_size_per_gpu": "auto"})",
                {"train_micro_batch_size_per_gpu", "\"auto\" needs the program's micro_batch"});
  ExpectInvalid(R"({"zero_optimization": {"reduce_bucket_size": "auto"}})",
                {"zero_optimization.reduce_bucket_size", "hidden_size"});
  ExpectInvalid(R"({"optimizer": {"params": {"lr": "auto"}}})",
                {"optimizer.params.lr", "needs the program's lr"});
  ExpectInvalid(R"({"fp16": {"enabled": "auto"}})", {"fp16.enabled", "precision"});
  ExpectInvalid(R"({"fp16": "auto"})", {"fp16", "no meaning for this key"});
  ExpectInvalid(R"({"zero_optimization": {"stage": "auto"}})",
                {"zero_optimization.stage", "no meaning"});
  ProgramValues program;
  program.flags = {{"lr", "--lr"}, {"dp_world_size", "--world"}};
  program.micro_batch = 4;
  Status s = ParseEngineConfig(R"({"train_batch_size": "auto"})", program, nullptr).status();
  EXPECT_THAT(s.message(), HasSubstr("train_batch_size"));
  EXPECT_THAT(s.message(), HasSubstr("accumulation_steps, dp_world_size (--world)"));
}

// A value an "auto" became that the key refuses names where it came from.
TEST(EngineConfigTest, AutoValueOutOfRangeNamesItsSource) {
  ProgramValues program;
  program.warmup_steps = 0;
  program.flags = {{"warmup_steps", "--warmup-steps"}};
  Status s = ParseEngineConfig(R"({"scheduler": {"type": "WarmupLR", "params":
                                   {"warmup_num_steps": "auto"}}})", program, nullptr).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("scheduler.params.warmup_num_steps: 0 is out of range"));
  EXPECT_THAT(s.message(), HasSubstr("from the program's warmup_steps (--warmup-steps)"));
}

// A derivation past int64 (hidden_size^2 with hidden 2^40; found by config_fuzz_test under
// UBSan as a signed overflow) is refused by the key, naming where the value came from.
TEST(EngineConfigTest, AutoDerivationsThatOverflowAreErrors) {
  ProgramValues program;
  program.hidden_size = int64_t{1} << 40;
  program.micro_batch = int64_t{1} << 40;
  program.accumulation_steps = int64_t{1} << 40;
  program.dp_world_size = 2;
  for (const char* key : {"reduce_bucket_size", "stage3_prefetch_bucket_size"}) {
    Status s = ParseEngineConfig(fmt::format(R"({{"zero_optimization": {{"{}": "auto"}}}})", key),
                                 program, nullptr)
                   .status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("does not fit in a 64-bit integer"));
    EXPECT_THAT(s.message(), HasSubstr(key));
    EXPECT_THAT(s.message(), HasSubstr("hidden_size"));
  }
  Status s = ParseEngineConfig(R"({"train_batch_size": "auto"})", program, nullptr).status();
  EXPECT_THAT(s.message(), HasSubstr("train_batch_size"));
  EXPECT_THAT(s.message(), HasSubstr("does not fit in a 64-bit integer"));
}

// [Note: "auto" as the Hugging Face integration fills it]: a template in the shape of the
// integration's ZeRO-3 example, every "auto" resolved from the program and listed.
TEST(EngineConfigTest, AutoResolvesFromTheProgramAsTheHuggingFaceIntegration) {
  constexpr const char* kTemplate = R"({
    "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                              "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto",
        "warmup_max_lr": "auto", "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "overlap_comm": true, "contiguous_gradients": true,
        "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto"},
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto"
  })";
  ProgramValues p;
  p.micro_batch = 4;
  p.accumulation_steps = 2;
  p.dp_world_size = 8;
  p.max_grad_norm = 1.0;
  p.lr = 3e-4;
  p.betas = {{0.9, 0.95}};
  p.eps = 1e-8;
  p.weight_decay = 0.1;
  p.warmup_steps = 100;
  p.total_steps = 1000;
  p.hidden_size = 1024;
  p.precision = "bf16";
  std::vector<AutoFill> filled;
  StatusOr<EngineConfig> c = ParseEngineConfig(kTemplate, p, &filled);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->fp16.enabled);
  EXPECT_TRUE(c->bf16.enabled);
  EXPECT_EQ(c->optimizer.lr, 3e-4);
  EXPECT_EQ(c->optimizer.betas[1], 0.95);
  EXPECT_EQ(c->optimizer.weight_decay, 0.1);
  EXPECT_EQ(c->scheduler.warmup_min_lr, 0.0);
  EXPECT_EQ(c->scheduler.warmup_max_lr, 3e-4);
  EXPECT_EQ(c->scheduler.warmup_num_steps, 100);
  EXPECT_EQ(c->scheduler.total_num_steps, 1000);
  EXPECT_EQ(c->zero_optimization.reduce_bucket_size, 1024 * 1024);
  EXPECT_EQ(c->zero_optimization.stage3_prefetch_bucket_size, 943718);  // int(0.9 x 1024^2)
  EXPECT_EQ(c->zero_optimization.stage3_param_persistence_threshold, 10240);
  EXPECT_EQ(c->gradient_clipping, 1.0);
  EXPECT_EQ(c->train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c->gradient_accumulation_steps, 2);
  EXPECT_EQ(c->train_batch_size, 64);
  ASSERT_EQ(filled.size(), 17u);
  EXPECT_EQ(filled[0].key, "bf16.enabled");  // keys in sorted order, as the JSON object keeps
  EXPECT_EQ(filled[0].value, "true");
  bool saw_bucket = false;
  for (const AutoFill& f : filled) {
    if (f.key == "zero_optimization.reduce_bucket_size") {
      saw_bucket = true;
      EXPECT_EQ(f.value, "1048576");
      EXPECT_EQ(f.from, "hidden_size^2");
    }
  }
  EXPECT_TRUE(saw_bucket);
}

TEST(EngineConfigTest, Fp16AndBf16TogetherAreAnError) {
  ExpectInvalid(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})",
                {"fp16.enabled", "bf16.enabled"});
  EXPECT_TRUE(ParseEngineConfig(R"({"fp16": {"enabled": true}, "bf16": {"enabled": false}})").ok());
}

TEST(EngineConfigTest, OffloadDevicesAndTheStagesTheyNeed) {
  auto text = [](const char* section, const char* device, int stage) {
    return fmt::format(
        R"({{"zero_optimization": {{"stage": {}, "{}": {{"device": "{}", "nvme_path": "/tmp"}}}}}})",
        stage, section, device);
  };
  // The optimizer's shard leaves the device at stages 1-3, in host memory or on NVMe.
  for (const char* device : {"cpu", "nvme"}) {
    for (int stage = 1; stage <= 3; ++stage) {
      auto c = ParseEngineConfig(text("offload_optimizer", device, stage));
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      EXPECT_EQ(c->zero_optimization.offload_optimizer.device,
                device[0] == 'c' ? OffloadDevice::kCpu : OffloadDevice::kNvme);
    }
    ExpectInvalid(text("offload_optimizer", device, 0),
                  {"zero_optimization.offload_optimizer.device", device, "stage 1, 2 or 3",
                   "stage is 0"});
  }
  // Parameters are offloaded at stage 3 only.
  for (const char* device : {"cpu", "nvme"}) {
    EXPECT_TRUE(ParseEngineConfig(text("offload_param", device, 3)).ok()) << device;
    for (int stage = 0; stage <= 2; ++stage) {
      ExpectInvalid(text("offload_param", device, stage),
                    {"zero_optimization.offload_param.device", "stage 3"});
    }
  }
  for (const char* section : {"offload_optimizer", "offload_param"}) {
    std::string none =
        fmt::format(R"({{"zero_optimization": {{"{}": {{"device": "none"}}}}}})", section);
    EXPECT_TRUE(ParseEngineConfig(none).ok()) << none;
  }
  ExpectInvalid(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})",
                {"zero_optimization.offload_param.nvme_path", "nvme"});
  ExpectInvalid(
      R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp", "buffer_count": 1}}})",
      {"zero_optimization.offload_optimizer.buffer_count", ">= 2"});
  // DeepSpeed's defaults: 4 optimizer buffers, 5 parameter buffers, no read/write pipelining.
  EngineConfig d;
  EXPECT_EQ(d.zero_optimization.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(d.zero_optimization.offload_param.buffer_count, 5);
  EXPECT_FALSE(d.zero_optimization.offload_optimizer.pipeline_read);
  EXPECT_EQ(d.zero_optimization.sub_group_size, 1'000'000'000);
}

TEST(EngineConfigTest, MalformedJsonNamesTheLineAndColumn) {
  ExpectInvalid("{\n  \"fp16\": {\"enabled\": true,}\n}", {"malformed JSON", "line 2"});
  ExpectInvalid("", {"malformed JSON"});
  ExpectInvalid(R"({"zero_optimization": {"stage": 1, "stage": 2}})",
                {"\"zero_optimization.stage\"", "more than once"});
}

// Gives every key a value other than its default, except the few whose only other values are
// errors with the rest of this config (offload devices) or conflict with another key (bf16 with fp16).
// Every parameter of `type` off its default (SchedulerParamNames), the others at theirs.
SchedulerConfig NonDefaultScheduler(SchedulerType type) {
  SchedulerConfig s;
  s.type = type;
  for (const std::string& name : SchedulerParamNames(type)) {
    if (name == "warmup_min_lr") s.warmup_min_lr = 1e-5;
    if (name == "warmup_max_lr") s.warmup_max_lr = 2e-3;
    if (name == "warmup_num_steps") s.warmup_num_steps = 17;
    if (name == "warmup_type") s.warmup_type = WarmupType::kLinear;
    if (name == "total_num_steps") s.total_num_steps = 170;
    if (name == "warmup_min_ratio") s.warmup_min_ratio = 0.05;
    if (name == "cos_min_ratio") s.cos_min_ratio = 0.3;
    if (name == "cycle_min_lr") s.cycle_min_lr = 1e-4;
    if (name == "cycle_max_lr") s.cycle_max_lr = 1e-2;
    if (name == "decay_lr_rate") s.decay_lr_rate = 0.5;
    if (name == "cycle_first_step_size") s.cycle_first_step_size = 11;
    if (name == "cycle_second_step_size") s.cycle_second_step_size = 7;
    if (name == "cycle_first_stair_count") s.cycle_first_stair_count = 3;
    if (name == "cycle_second_stair_count") s.cycle_second_stair_count = 2;
    if (name == "decay_step_size") s.decay_step_size = 5;
    if (name == "cycle_momentum") s.cycle_momentum = false;
    if (name == "cycle_min_mom") s.cycle_min_mom = 0.85;
    if (name == "cycle_max_mom") s.cycle_max_mom = 0.95;
    if (name == "decay_mom_rate") s.decay_mom_rate = 0.01;
    if (name == "lr_range_test_min_lr") s.lr_range_test_min_lr = 1e-5;
    if (name == "lr_range_test_step_size") s.lr_range_test_step_size = 10;
    if (name == "lr_range_test_step_rate") s.lr_range_test_step_rate = 2.5;
    if (name == "lr_range_test_staircase") s.lr_range_test_staircase = true;
  }
  return s;
}

EngineConfig NonDefaultConfig() {
  EngineConfig c;
  c.train_batch_size = 48;
  c.train_micro_batch_size_per_gpu = 3;
  c.gradient_accumulation_steps = 4;
  c.gradient_clipping = 0.75;
  c.steps_per_print = 7;
  ZeroConfig& z = c.zero_optimization;
  z.stage = 2;
  z.reduce_bucket_size = 123'456'789;
  z.allgather_bucket_size = 987'654'321;
  z.overlap_comm = true;
  z.contiguous_gradients = false;
  z.reduce_scatter = false;
  z.stage3_prefetch_bucket_size = 1;
  z.stage3_max_live_parameters = 2;
  z.stage3_max_reuse_distance = 3;
  z.stage3_param_persistence_threshold = 4;
  z.stage3_gather_16bit_weights_on_model_save = true;
  z.sub_group_size = 5;
  for (OffloadConfig* o : {&z.offload_optimizer, &z.offload_param}) {
    o->nvme_path = "/scratch/zs";
    o->pin_memory = true;
    o->buffer_count = 9;
    o->buffer_size = 4096;
  }
  z.offload_optimizer.pipeline_read = true;  // optimizer keys only
  z.offload_optimizer.pipeline_write = true;
  z.offload_param.max_in_cpu = 77;  // a parameter key only
  c.aio = {.block_size = 4096,
           .queue_depth = 3,
           .intra_op_parallelism = 5,
           .single_submit = true,
           .overlap_events = false};
  c.fp16 = {.enabled = true,
            .loss_scale = 128.0,
            .initial_scale_power = 12,
            .loss_scale_window = 50,
            .hysteresis = 4,
            .min_loss_scale = 0.25};
  c.optimizer = {.type = OptimizerType::kAdam,
                 .lr = 0.1 / 3.0,
                 .betas = {0.8, 0.99},
                 .eps = 1.0 / 3e7,
                 .weight_decay = 0.05,
                 .adam_w_mode = false,
                 .torch_adam = true,
                 .momentum = 0.5,
                 .nesterov = true,
                 .initial_accumulator_value = 0.125};
  c.scheduler = NonDefaultScheduler(SchedulerType::kWarmupCosineLR);
  c.zerostack = {.comm_timeout_ms = 1234,
                 .max_inflight_buckets = 5,
                 .alignment = 128,
                 .prefetch = false,
                 .optimizer_state_dtype = OptimizerStateType::kInt8,
                 .optimizer_threads = 3,
                 .optimizer_prefetch = 0,
                 .optimizer_cache_resident_bytes = 0,
                 .pin_memory_fallback = true,
                 .allow_unused_units = true};
  c.zerostack.param_groups = {
      {.name = "embeddings", .lr_scale = 0.25, .betas = {{0.85, 0.95}}, .eps = 1e-6,
       .weight_decay = 0.0},
      {.name = "head"}};
  return c;
}

TEST(EngineConfigTest, ToJsonRoundTripsEveryKey) {
  // (scheduler.params: per type, SchedulerParamsRoundTripPerType.)
  const EngineConfig c = NonDefaultConfig();
  std::string text = EngineConfigToJson(c);
  StatusOr<EngineConfig> back = ParseEngineConfig(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  EXPECT_EQ(*back, c);                            // defaulted operator==: field by field
  EXPECT_EQ(back->optimizer.lr, c.optimizer.lr);  // doubles exactly, not approximately
  EXPECT_EQ(back->optimizer.eps, c.optimizer.eps);

  // The test config really moves every key off its default (so the round trip covers it), and
  // the JSON holds every key that has a field.
  const std::set<std::string> unchanged = {"zero_optimization.offload_optimizer.device",
                                           "zero_optimization.offload_param.device",
                                           "bf16.enabled",
                                           "optimizer.params.bias_correction"};  // false: refused
  Json json = Json::parse(text);
  Json defaults = Json::parse(EngineConfigToJson(EngineConfig{}));
  for (const ConfigKeyInfo& key : EngineConfigKeys()) {
    std::string pointer = "/" + key.path;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    if (key.ignored) {
      EXPECT_FALSE(json.contains(Json::json_pointer(pointer))) << key.path;
      continue;
    }
    if (key.path.starts_with("scheduler.params.")) continue;
    ASSERT_TRUE(json.contains(Json::json_pointer(pointer))) << key.path;
    EXPECT_EQ(defaults[Json::json_pointer(pointer)], Json::parse(key.default_json)) << key.path;
    if (unchanged.count(key.path) == 0) {
      EXPECT_NE(json[Json::json_pointer(pointer)], defaults[Json::json_pointer(pointer)])
          << key.path << " is not exercised by the round trip";
    }
  }
  // And the defaults round-trip too.
  StatusOr<EngineConfig> d = ParseEngineConfig(EngineConfigToJson(EngineConfig{}));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, EngineConfig{});
}

TEST(EngineConfigTest, KeyListHasUniquePathsAndFullInfo) {
  std::set<std::string> paths;
  for (const ConfigKeyInfo& key : EngineConfigKeys()) {
    EXPECT_TRUE(paths.insert(key.path).second) << "duplicate " << key.path;
    EXPECT_FALSE(key.type.empty()) << key.path;
    EXPECT_FALSE(key.allowed.empty()) << key.path;
    EXPECT_FALSE(key.description.empty()) << key.path;
    EXPECT_TRUE(Json::accept(key.default_json)) << key.path;
  }
  EXPECT_TRUE(paths.count("zero_optimization.stage3_prefetch_bucket_size"));
  EXPECT_TRUE(paths.count("scheduler.params.cos_min_ratio"));
}

// DeepSpeed's schedulers, step by step, against values worked out by hand from DeepSpeed's
// definitions ([Note: DeepSpeed's step offset]: optimizer step s is DeepSpeed's
// last_batch_iteration s - 1, and the first step runs with the value the constructor set).
TEST(EngineConfigTest, SchedulersFollowDeepSpeedStepByStep) {
  const double base = 0.5;  // optimizer.params.lr
  SchedulerConfig s;
  s.type = SchedulerType::kNone;
  for (int64_t step : {0, 5, 1000}) EXPECT_EQ(s.LearningRate(step, base), base);

  // WarmupLR, log (DeepSpeed's default): min + (max - min) ln(i + 1) / ln(W).
  s = SchedulerConfig{};
  s.type = SchedulerType::kWarmupLR;
  s.warmup_min_lr = 1e-4;
  s.warmup_max_lr = 1e-3;
  s.warmup_num_steps = 10;
  const double lo = 1e-4, d = 9e-4;
  EXPECT_EQ(s.LearningRate(0, base), lo);  // the constructor's value
  EXPECT_EQ(s.LearningRate(1, base), lo);  // i = 0: ln 1 = 0
  EXPECT_DOUBLE_EQ(s.LearningRate(2, base), lo + d * std::log(2.0) / std::log(10.0));
  EXPECT_DOUBLE_EQ(s.LearningRate(5, base), lo + d * std::log(5.0) / std::log(10.0));
  EXPECT_DOUBLE_EQ(s.LearningRate(10, base), 1e-3);  // i = 9: ln 10 / ln 10
  EXPECT_EQ(s.LearningRate(11, base), lo + d);
  EXPECT_EQ(s.LearningRate(100000, base), lo + d);
  s.warmup_type = WarmupType::kLinear;  // i / W
  EXPECT_EQ(s.LearningRate(0, base), lo);
  EXPECT_EQ(s.LearningRate(1, base), lo);
  EXPECT_DOUBLE_EQ(s.LearningRate(4, base), lo + d * 0.3);
  EXPECT_DOUBLE_EQ(s.LearningRate(10, base), lo + d * 0.9);
  EXPECT_EQ(s.LearningRate(11, base), lo + d);
  s.warmup_max_lr.reset();  // DeepSpeed: the optimizer's lr
  EXPECT_EQ(s.LearningRate(11, base), base);
  s.warmup_num_steps = 1;  // DeepSpeed warms up over at least 2 steps
  s.warmup_type = WarmupType::kLog;
  EXPECT_EQ(s.LearningRate(1, base), lo);
  EXPECT_DOUBLE_EQ(s.LearningRate(2, base), base);

  // WarmupDecayLR: the warm-up, then (T - i) / (T - W) down to 0 at i = T.
  s = SchedulerConfig{};
  s.type = SchedulerType::kWarmupDecayLR;
  s.warmup_min_lr = 1e-4;
  s.warmup_max_lr = 1e-3;
  s.warmup_num_steps = 10;
  s.total_num_steps = 110;
  s.warmup_type = WarmupType::kLinear;
  EXPECT_DOUBLE_EQ(s.LearningRate(4, base), lo + d * 0.3);
  EXPECT_EQ(s.LearningRate(11, base), lo + d);       // i = 10: 100 / 100
  EXPECT_EQ(s.LearningRate(61, base), lo + d * 0.5);  // i = 60: 50 / 100
  EXPECT_EQ(s.LearningRate(111, base), lo);          // i = 110
  EXPECT_EQ(s.LearningRate(500, base), lo);          // clamped at 0

  // WarmupCosineLR: ratios of optimizer.params.lr; 0 before the first scheduler step.
  s = SchedulerConfig{};
  s.type = SchedulerType::kWarmupCosineLR;
  s.total_num_steps = 110;
  s.warmup_num_steps = 10;
  s.warmup_min_ratio = 0.1;
  s.cos_min_ratio = 0.1;
  s.warmup_type = WarmupType::kLinear;
  EXPECT_EQ(s.LearningRate(0, base), 0.0);
  EXPECT_DOUBLE_EQ(s.LearningRate(1, base), base * 0.1);             // i = 0
  EXPECT_DOUBLE_EQ(s.LearningRate(6, base), base * (0.1 + 0.5 * 0.9));  // i = 5
  EXPECT_DOUBLE_EQ(s.LearningRate(10, base), base * (0.1 + 0.9 * 0.9));  // i = 9
  // i = 10: the first cosine step, p = (10 - 10 + 1) / 100.
  EXPECT_DOUBLE_EQ(s.LearningRate(11, base),
                   base * (0.1 + 0.9 * (1 + std::cos(std::numbers::pi * 0.01)) / 2));
  EXPECT_DOUBLE_EQ(s.LearningRate(60, base), base * (0.1 + 0.9 * 0.5));  // p = 1/2
  EXPECT_DOUBLE_EQ(s.LearningRate(110, base), base * 0.1);               // p = 1
  EXPECT_DOUBLE_EQ(s.LearningRate(5000, base), base * 0.1);
  // DeepSpeed's warm-up ends below the peak (0.91 at i = 9) and the cosine starts near it.
  for (int64_t step = 11; step < 110; ++step) {
    EXPECT_GE(s.LearningRate(step, base), s.LearningRate(step + 1, base)) << step;
  }
  s.warmup_type = WarmupType::kLog;
  EXPECT_DOUBLE_EQ(s.LearningRate(4, base),
                   base * (0.1 + 0.9 * std::log(4.0) / std::log(10.0)));  // i = 3

  // OneCycle: 0.1 up to 1.1 over 10 steps and back over 10, then decay every 5 steps at 0.5;
  // beta1 the other way between 0.9 and 0.8, beta2 0.99.
  s = SchedulerConfig{};
  s.type = SchedulerType::kOneCycle;
  s.cycle_min_lr = 0.1;
  s.cycle_max_lr = 1.1;
  s.cycle_first_step_size = 10;
  s.decay_step_size = 5;
  s.decay_lr_rate = 0.5;
  s.decay_mom_rate = 0.1;
  auto one_cycle = MakeLrSchedule(s, base);
  auto betas = [&](int64_t step) { return one_cycle->Betas(step).value(); };
  EXPECT_EQ(one_cycle->At(0), 0.1);  // the constructor's value, and its momentum
  EXPECT_EQ(betas(0)[0], 0.8);
  EXPECT_EQ(betas(0)[1], 0.99);
  EXPECT_DOUBLE_EQ(one_cycle->At(5), 0.6);  // halfway up
  EXPECT_DOUBLE_EQ(betas(5)[0], 0.85);
  EXPECT_DOUBLE_EQ(one_cycle->At(10), 1.1);  // the top
  EXPECT_DOUBLE_EQ(betas(10)[0], 0.8);
  EXPECT_DOUBLE_EQ(one_cycle->At(15), 0.6);  // halfway down
  EXPECT_DOUBLE_EQ(one_cycle->At(20), 0.1);  // i = 19: the cycle's end
  EXPECT_DOUBLE_EQ(betas(20)[0], 0.9);
  EXPECT_DOUBLE_EQ(one_cycle->At(21), 0.1 / (1 + 0.5 * 0.2));  // i = 20: decay interval 1/5
  EXPECT_DOUBLE_EQ(betas(21)[0], 0.9 * (1 + 0.1 * 0.2));
  EXPECT_DOUBLE_EQ(one_cycle->At(30), 0.1 / 2);
  EXPECT_EQ(betas(30)[1], 0.99);
  s.cycle_first_stair_count = 2;  // the second half takes the first's count when not given
  one_cycle = MakeLrSchedule(s, base);
  EXPECT_DOUBLE_EQ(one_cycle->At(3), 0.1);  // stair 0 of 2: floor(3 * 2 / 10) = 0
  EXPECT_DOUBLE_EQ(one_cycle->At(5), 0.6);  // stair 1
  EXPECT_DOUBLE_EQ(one_cycle->At(10), 1.1);
  EXPECT_DOUBLE_EQ(one_cycle->At(12), 0.6);  // falling: floor((20 - 12) * 2 / 10) = 1
  EXPECT_DOUBLE_EQ(one_cycle->At(16), 0.1);
  s.cycle_momentum = false;
  EXPECT_FALSE(MakeLrSchedule(s, base)->Betas(5).has_value());
  s.decay_step_size = 0;  // no decay: the cycle's minimum after it
  s.cycle_first_stair_count = 0;
  EXPECT_EQ(MakeLrSchedule(s, base)->At(50), 0.1);

  // LRRangeTest: min (1 + rate (i + 1) / size), floored with staircase.
  s = SchedulerConfig{};
  s.type = SchedulerType::kLRRangeTest;
  s.lr_range_test_min_lr = 1e-3;
  s.lr_range_test_step_size = 10;
  s.lr_range_test_step_rate = 2;
  EXPECT_EQ(s.LearningRate(0, base), 1e-3);
  EXPECT_DOUBLE_EQ(s.LearningRate(5, base), 2e-3);
  EXPECT_DOUBLE_EQ(s.LearningRate(10, base), 3e-3);
  s.lr_range_test_staircase = true;
  EXPECT_EQ(s.LearningRate(5, base), 1e-3);
  EXPECT_DOUBLE_EQ(s.LearningRate(10, base), 3e-3);
  EXPECT_DOUBLE_EQ(s.LearningRate(19, base), 3e-3);
}

// Each type writes exactly its own parameters and reads them back unchanged.
TEST(EngineConfigTest, SchedulerParamsRoundTripPerType) {
  for (SchedulerType type :
       {SchedulerType::kNone, SchedulerType::kWarmupLR, SchedulerType::kWarmupDecayLR,
        SchedulerType::kWarmupCosineLR, SchedulerType::kOneCycle, SchedulerType::kLRRangeTest}) {
    EngineConfig c;
    c.scheduler = NonDefaultScheduler(type);
    const std::string text = EngineConfigToJson(c);
    StatusOr<EngineConfig> back = ParseEngineConfig(text);
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
    EXPECT_EQ(back->scheduler, c.scheduler) << text;
    const Json json = Json::parse(text);
    std::set<std::string> written;
    if (json["scheduler"].contains("params")) {
      for (const auto& [name, value] : json["scheduler"]["params"].items()) written.insert(name);
    }
    const std::vector<std::string>& names = SchedulerParamNames(type);
    EXPECT_EQ(written, std::set<std::string>(names.begin(), names.end())) << text;
  }
  // Unset optional parameters stay unset.
  EngineConfig c;
  c.scheduler.type = SchedulerType::kOneCycle;
  StatusOr<EngineConfig> back = ParseEngineConfig(EngineConfigToJson(c));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FALSE(back->scheduler.cycle_second_step_size.has_value());
  EXPECT_FALSE(back->scheduler.warmup_max_lr.has_value());
}

// [Note: batch sizes as DeepSpeed]: any two determine the third at the world size.
TEST(EngineConfigTest, BatchSizesResolveAsDeepSpeedResolvesThem) {
  auto resolve = [](const char* text, int world) -> StatusOr<EngineConfig> {
    StatusOr<EngineConfig> c = ParseEngineConfig(text);
    if (!c.ok()) return c.status();
    ZS_RETURN_IF_ERROR(c->ResolveBatchSizes(world, "ds.json"));
    return c;
  };
  auto expect = [&](const char* text, int world, int64_t train, int64_t micro, int64_t ga) {
    StatusOr<EngineConfig> c = resolve(text, world);
    ASSERT_TRUE(c.ok()) << text << ": " << c.status().ToString();
    EXPECT_EQ(c->train_batch_size, train) << text;
    EXPECT_EQ(c->train_micro_batch_size_per_gpu, micro) << text;
    EXPECT_EQ(c->gradient_accumulation_steps, ga) << text;
  };
  expect(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})", 4, 64, 4, 4);
  expect(R"({"train_batch_size": 64, "gradient_accumulation_steps": 2})", 4, 64, 8, 2);
  expect(R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})", 4, 32, 4,
         2);
  expect(R"({"train_batch_size": 64})", 8, 64, 8, 1);
  expect(R"({"train_micro_batch_size_per_gpu": 3})", 5, 15, 3, 1);
  expect(R"({"train_batch_size": 24, "train_micro_batch_size_per_gpu": 4,
             "gradient_accumulation_steps": 2})", 3, 24, 4, 2);
  // A true mismatch names the file, the three values with their origin, and the world size.
  Status s = resolve(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})", 4)
                 .status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  for (const char* part : {"config ds.json", "train_batch_size 30 (given)",
                           "train_micro_batch_size_per_gpu 4 (given)",
                           "gradient_accumulation_steps 1 (derived)", "world size 4"}) {
    EXPECT_THAT(s.message(), HasSubstr(part)) << s.message();
  }
  s = resolve(R"({"train_batch_size": 24, "train_micro_batch_size_per_gpu": 4,
                  "gradient_accumulation_steps": 2})", 4).status();
  EXPECT_THAT(s.message(), HasSubstr("gradient_accumulation_steps 2 (given)"));
  s = resolve(R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 8})", 2).status();
  EXPECT_THAT(s.message(), HasSubstr("no whole micro-batch or accumulation step"));
  s = resolve(R"({"gradient_accumulation_steps": 4})", 2).status();
  EXPECT_THAT(s.message(), HasSubstr("neither train_batch_size nor train_micro_batch_size_per_gpu"));
  // A config built in code gives its micro-batch and accumulation steps.
  EngineConfig c;
  c.train_micro_batch_size_per_gpu = 2;
  c.gradient_accumulation_steps = 3;
  ASSERT_TRUE(c.ResolveBatchSizes(4, "").ok());
  EXPECT_EQ(c.train_batch_size, 24);
}

TEST(EngineConfigTest, ValidateForWorldChecksTheBatchProduct) {
  EngineConfig c;
  c.train_micro_batch_size_per_gpu = 4;
  c.gradient_accumulation_steps = 2;
  EXPECT_TRUE(c.ValidateForWorld(3).ok());  // train_batch_size not given
  c.train_batch_size = 24;
  EXPECT_TRUE(c.ValidateForWorld(3).ok());
  Status s = c.ValidateForWorld(4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  for (const char* part : {"train_batch_size 24", "train_micro_batch_size_per_gpu 4",
                           "gradient_accumulation_steps 2", "world size 4", "32"}) {
    EXPECT_THAT(s.message(), HasSubstr(part)) << s.message();
  }
  EXPECT_FALSE(c.ValidateForWorld(0).ok());
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("zs_engine_config_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& text) const {
    std::string file = (path_ / name).string();
    std::ofstream(file) << text;
    return file;
  }
  std::filesystem::path path_;
};

// [Note: bounded input] Hostile configs are refused quickly, with bounded messages: deep
// nesting (100,000 '[' overflowed the stack; 100,000 '{"a":' took 9.6 GB in the duplicate-key
// path), a token of megabytes, a device file, a huge file.
TEST(EngineConfigTest, HostileInputsAreBoundedErrors) {
  const std::string brackets(100'000, '[');
  std::string objects;
  for (int i = 0; i < 100'000; ++i) objects += "{\"a\":";
  for (const std::string* text : {&brackets, static_cast<const std::string*>(&objects)}) {
    Status s = ParseEngineConfig(*text).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("more than 32 levels deep"));
    // The 33rd opening: column 33 of the brackets, 32 x 5 + 1 of the objects.
    EXPECT_THAT(s.message(), HasSubstr(text == &brackets ? "column 33)" : "column 161)"));
  }
  // Brackets inside strings do not count; 32 levels are fine as JSON (and then refused as keys).
  Status quoted = ParseEngineConfig(R"({"optimizer": {"type": ")" + brackets + "\"}}").status();
  EXPECT_THAT(quoted.message(), HasSubstr("optimizer.type"));
  EXPECT_THAT(quoted.message(), Not(HasSubstr("levels deep")));
  EXPECT_LT(quoted.message().size(), 400u);
  const std::string long_token = "{\"a\": " + std::string(1 << 20, '7') + "x}";
  Status s = ParseEngineConfig(long_token).status();
  EXPECT_THAT(s.message(), HasSubstr("malformed JSON"));
  EXPECT_LT(s.message().size(), 400u);

  s = LoadEngineConfig("/dev/zero").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("/dev/zero: not a regular file"));
  TempDir dir;
  const std::string huge = dir.Write("huge.json", "{}");
  std::filesystem::resize_file(huge, (uintmax_t{16} << 20) + 1);  // sparse
  s = LoadEngineConfig(huge).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("16777217 bytes"));
}

// JSON has no NUL bytes; the parser took the first one for the end of the input and dropped
// what followed without a word (issue 27). Refused wherever it is, naming the byte offset, and
// from a file naming the file too.
TEST(EngineConfigTest, NulBytesAreErrorsNamingTheOffset) {
  using namespace std::string_literals;
  const std::string after_object = "{\"zero_optimization\": {\"stage\": 2}}\0{\"fp16\": 7}"s;
  ExpectInvalid(after_object, {"NUL byte at byte offset 35", "line 1, column 36"});
  ExpectInvalid("{\n  \"steps_per_print\": 1\0}"s, {"byte offset 24", "line 2, column 23"});
  ExpectInvalid("\0"s, {"byte offset 0"});
  ExpectInvalid("{\"optimizer\": {\"type\": \"Adam\0W\"}}"s, {"byte offset 28"});
  TempDir dir;
  const std::string file = dir.Write("nul.json", after_object);
  Status s = LoadEngineConfig(file).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr(file));
  EXPECT_THAT(s.message(), HasSubstr("NUL byte at byte offset 35"));
}

TEST(EngineConfigTest, LoadNamesThePath) {
  TempDir dir;
  std::string good = dir.Write("good.json", kDeepSpeedExample);
  StatusOr<EngineConfig> c = LoadEngineConfig(good);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c, *ParseEngineConfig(kDeepSpeedExample));

  std::string missing = (dir.path_ / "missing.json").string();
  Status s = LoadEngineConfig(missing).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(missing));

  std::string bad = dir.Write("bad.json", R"({"zero_optimization": {"stage": 7}})");
  s = LoadEngineConfig(bad).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(bad));
  EXPECT_THAT(s.message(), HasSubstr("zero_optimization.stage"));

  std::string broken = dir.Write("broken.json", "{\"fp16\": ");
  s = LoadEngineConfig(broken).status();
  EXPECT_THAT(s.message(), HasSubstr(broken));
  EXPECT_THAT(s.message(), HasSubstr("malformed JSON"));

  s = LoadEngineConfig(dir.path_.string()).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(dir.path_.string()));

  if (::geteuid() != 0) {  // root reads anything
    std::string locked = dir.Write("locked.json", "{}");
    std::filesystem::permissions(locked, std::filesystem::perms::none);
    s = LoadEngineConfig(locked).status();
    EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(locked));
  }
}

}  // namespace
}  // namespace zs

namespace zs {
namespace {

TEST(EngineConfigTest, OptimizerKindsAndTheirKeys) {
  auto sgd = ParseEngineConfig(
      R"({"optimizer": {"type": "sgd", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true}}})");
  ASSERT_TRUE(sgd.ok()) << sgd.status().ToString();
  EXPECT_EQ(sgd->optimizer.type, OptimizerType::kSgd);
  EXPECT_EQ(sgd->optimizer.momentum, 0.9);
  EXPECT_TRUE(sgd->optimizer.nesterov);
  auto lion = ParseEngineConfig(R"({"optimizer": {"type": "Lion"}})");
  ASSERT_TRUE(lion.ok());
  EXPECT_EQ(lion->optimizer.type, OptimizerType::kLion);
  auto adagrad = ParseEngineConfig(
      R"({"optimizer": {"type": "Adagrad", "params": {"initial_accumulator_value": 0.1}}})");
  ASSERT_TRUE(adagrad.ok());
  EXPECT_EQ(adagrad->optimizer.initial_accumulator_value, 0.1);
  auto bad = ParseEngineConfig(R"({"optimizer": {"type": "SGD", "params": {"nesterov": true}}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("optimizer.params.momentum"), std::string::npos)
      << bad.status().ToString();
  auto dtype = ParseEngineConfig(R"({"zerostack": {"optimizer_state_dtype": "fp8"}})");
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find("fp32, bf16, int8"), std::string::npos)
      << dtype.status().ToString();
  auto momentum = ParseEngineConfig(R"({"optimizer": {"params": {"momentum": 1.0}}})");
  EXPECT_FALSE(momentum.ok());
}

TEST(EngineConfigTest, ParamGroupsParse) {
  auto c = ParseEngineConfig(R"({"optimizer": {"type": "SGD", "params": {"momentum": 0.9}},
      "zerostack": {"param_groups": [
        {"name": "embeddings", "lr_scale": 0.1, "weight_decay": 0.0},
        {"name": "head", "momentum": 0.5, "eps": 1e-6},
        {"name": "frozen", "lr_scale": 0}]}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const auto& g = c->zerostack.param_groups;
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].name, "embeddings");
  EXPECT_EQ(g[0].lr_scale, 0.1);
  EXPECT_EQ(g[0].weight_decay, 0.0);
  EXPECT_FALSE(g[0].betas.has_value());
  EXPECT_FALSE(g[0].eps.has_value());
  EXPECT_EQ(g[1].lr_scale, 1.0);
  EXPECT_EQ(g[1].momentum, 0.5);
  EXPECT_EQ(g[1].eps, 1e-6);
  EXPECT_EQ(g[2].lr_scale, 0.0);
}

TEST(EngineConfigTest, ParamGroupErrorsNameTheGroupAndField) {
  const std::string pre = R"({"zerostack": {"param_groups": )";
  ExpectInvalid(pre + R"({"name": "a"}}})", {"zerostack.param_groups", "expected an array"});
  ExpectInvalid(pre + R"([{"lr_scale": 2}]}})", {"zerostack.param_groups", "[0]", "\"name\" is required"});
  ExpectInvalid(pre + R"([{"name": ""}]}})", {"[0]", "name: expected a non-empty string"});
  ExpectInvalid(pre + R"([{"name": "a"}, {"name": "b", "betas": [0.9, 1.5]}]}})",
                {"zerostack.param_groups", "[1] (\"b\")", "betas[1]", "1.5", "out of range"});
  ExpectInvalid(pre + R"([{"name": "a", "betas": [0.9]}]}})", {"[0] (\"a\")", "betas", "two numbers"});
  ExpectInvalid(pre + R"([{"name": "a", "lr_scale": -1}]}})", {"lr_scale", "-1", "out of range"});
  ExpectInvalid(pre + R"([{"name": "a", "eps": 0}]}})", {"eps", "out of range"});
  ExpectInvalid(pre + R"([{"name": "a", "lr": 0.1}]}})", {"[0] (\"a\")", "unknown field \"lr\""});
  ExpectInvalid(pre + R"([{"name": "a", "weight_decy": 0.1}]}})",
                {"unknown field \"weight_decy\"", "did you mean \"weight_decay\""});
  ExpectInvalid(pre + R"([{"name": "a"}, {"name": "a"}]}})", {"[1] (\"a\")", "used by an earlier group"});
  ExpectInvalid(pre + R"([{"name": "a", "lr_scale": "big"}]}})", {"lr_scale", "expected a number"});
  // momentum: SGD only, and zero exactly when optimizer.params.momentum is.
  ExpectInvalid(pre + R"([{"name": "a", "momentum": 0.5}]}})", {"[0] (\"a\").momentum", "only SGD"});
  ExpectInvalid(R"({"optimizer": {"type": "SGD", "params": {"momentum": 0.9}},
                   "zerostack": {"param_groups": [{"name": "a", "momentum": 0}]}})",
                {"[0] (\"a\").momentum", "one momentum buffer"});
  ExpectInvalid(R"({"optimizer": {"type": "SGD"},
                   "zerostack": {"param_groups": [{"name": "a", "momentum": 0.9}]}})",
                {"[0] (\"a\").momentum", "one momentum buffer"});
}

}  // namespace
}  // namespace zs
