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
                "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4, "warmup_num_steps": 200,
                           "total_num_steps": 5000, "cos_min_ratio": 0.1}},
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
  EXPECT_EQ(c.scheduler.warmup_min_lr, 0.0);
  EXPECT_EQ(c.scheduler.warmup_max_lr, 3e-4);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 200);
  EXPECT_EQ(c.scheduler.total_num_steps, 5000);
  EXPECT_EQ(c.scheduler.cos_min_ratio, 0.1);
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
  ExpectInvalid(R"({"zero_optimization": {"stage3_gather_16bit_weights_on_model_save": true}})",
                {"zero_optimization.stage3_gather_16bit_weights_on_model_save"});
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
  ExpectInvalid(R"({"scheduler": {"type": "WarmupLR",
                    "params": {"warmup_min_lr": 0.1, "warmup_max_lr": 0.01}}})",
                {"scheduler.params.warmup_min_lr", "0.1", "0.01"});
  ExpectInvalid(R"({"scheduler": {"type": "WarmupCosineLR",
                    "params": {"warmup_num_steps": 100, "total_num_steps": 50}}})",
                {"scheduler.params.total_num_steps", "50", "100"});
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
  ExpectInvalid(R"({"scheduler": {"type": "OneCycle"}})",
                {"scheduler.type", "\"OneCycle\"", "none, WarmupLR, WarmupCosineLR"});
}

TEST(EngineConfigTest, AutoIsRejectedEverywhere) {
  ExpectInvalid(R"({"train_micro_batch_size_per_gpu": "auto"})",
                {"train_micro_batch_size_per_gpu", "\"auto\"", "explicit value", ">= 1"});
  ExpectInvalid(R"({"zero_optimization": {"reduce_bucket_size": "auto"}})",
                {"zero_optimization.reduce_bucket_size", "\"auto\"", "explicit value"});
  ExpectInvalid(R"({"optimizer": {"params": {"lr": "auto"}}})",
                {"optimizer.params.lr", "explicit value"});
  ExpectInvalid(R"({"fp16": {"enabled": "auto"}})", {"fp16.enabled", "explicit value"});
  ExpectInvalid(R"({"fp16": "auto"})", {"fp16", "explicit value"});
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
                 .momentum = 0.5,
                 .nesterov = true,
                 .initial_accumulator_value = 0.125};
  c.scheduler.type = SchedulerType::kWarmupCosineLR;
  c.scheduler.warmup_min_lr = 1e-5;
  c.scheduler.warmup_max_lr = 2e-3;
  c.scheduler.warmup_num_steps = 17;
  c.scheduler.total_num_steps = 170;
  c.scheduler.cos_min_ratio = 0.3;
  c.zerostack = {.comm_timeout_ms = 1234,
                 .max_inflight_buckets = 5,
                 .alignment = 128,
                 .prefetch = false,
                 .optimizer_state_dtype = OptimizerStateType::kInt8,
                 .optimizer_threads = 3,
                 .optimizer_prefetch = 0,
                 .optimizer_cache_resident_bytes = 0,
                 .pin_memory_fallback = true};
  c.zerostack.param_groups = {
      {.name = "embeddings", .lr_scale = 0.25, .betas = {{0.85, 0.95}}, .eps = 1e-6,
       .weight_decay = 0.0},
      {.name = "head"}};
  return c;
}

TEST(EngineConfigTest, ToJsonRoundTripsEveryKey) {
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
                                           "bf16.enabled"};
  Json json = Json::parse(text);
  Json defaults = Json::parse(EngineConfigToJson(EngineConfig{}));
  for (const ConfigKeyInfo& key : EngineConfigKeys()) {
    std::string pointer = "/" + key.path;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    if (key.ignored) {
      EXPECT_FALSE(json.contains(Json::json_pointer(pointer))) << key.path;
      continue;
    }
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

TEST(EngineConfigTest, SchedulerFollowsItsFormulas) {
  SchedulerConfig s;
  s.warmup_min_lr = 1e-4;
  s.warmup_max_lr = 1e-3;
  s.warmup_num_steps = 10;
  s.total_num_steps = 110;
  s.cos_min_ratio = 0.1;
  const double base = 0.5;
  const double lo = s.warmup_min_lr, hi = s.warmup_max_lr;

  s.type = SchedulerType::kNone;
  for (int64_t step : {0, 5, 1000}) EXPECT_EQ(s.LearningRate(step, base), base);

  s.type = SchedulerType::kWarmupLR;
  EXPECT_DOUBLE_EQ(s.LearningRate(0, base), lo);
  EXPECT_DOUBLE_EQ(s.LearningRate(3, base), lo + (hi - lo) * 0.3);
  EXPECT_DOUBLE_EQ(s.LearningRate(9, base), lo + (hi - lo) * 0.9);
  EXPECT_DOUBLE_EQ(s.LearningRate(10, base), hi);
  EXPECT_DOUBLE_EQ(s.LearningRate(100000, base), hi);
  EXPECT_DOUBLE_EQ(s.LearningRate(-4, base), lo);

  s.type = SchedulerType::kWarmupCosineLR;
  EXPECT_DOUBLE_EQ(s.LearningRate(0, base), lo);
  EXPECT_DOUBLE_EQ(s.LearningRate(5, base), lo + (hi - lo) * 0.5);
  EXPECT_DOUBLE_EQ(s.LearningRate(10, base), hi);
  // Halfway through the decay (step 60 of 10..110) the cosine term is 1/2.
  EXPECT_DOUBLE_EQ(s.LearningRate(60, base), hi * (0.1 + 0.9 * 0.5));
  double p = 25.0 / 100.0;
  EXPECT_DOUBLE_EQ(s.LearningRate(35, base),
                   hi * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi * p))));
  EXPECT_DOUBLE_EQ(s.LearningRate(110, base), 0.1 * hi);
  EXPECT_DOUBLE_EQ(s.LearningRate(5000, base), 0.1 * hi);
  // Monotone decay after the warm-up.
  for (int64_t step = 10; step < 110; ++step) {
    EXPECT_GE(s.LearningRate(step, base), s.LearningRate(step + 1, base)) << step;
  }
  // No warm-up, no decay span.
  s.warmup_num_steps = 0;
  s.total_num_steps = 0;
  EXPECT_DOUBLE_EQ(s.LearningRate(0, base), 0.1 * hi);
  s.type = SchedulerType::kWarmupLR;
  EXPECT_DOUBLE_EQ(s.LearningRate(0, base), hi);
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
