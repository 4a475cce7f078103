// ZeroEngine end to end on a hand-written model (examples/custom_model/tanh_mlp.h), ranks as
// threads: stages 0-3 bit-identical, world sizes agree, fp16 loss scaling, memory formulas,
// stage 3's live-parameter cap, and misuse errors.
#include "runtime/engine/zero_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <string>

#include "examples/custom_model/tanh_mlp.h"
#include "optimizers/cpu_optimizer.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/model/dense_unit_access.h"
#include "tests/runtime/engine/engine_test_support.h"

namespace zs {
namespace {

using examples::TanhMlp;
using testing_support::BaseConfig;
using testing_support::FillBatch;
using testing_support::RunResult;
using testing_support::RunSpec;
using testing_support::Train;
using testing_support::Uniform;

TEST(ZeroEngine, StagesAreBitIdenticalInFp32) {
  struct Case {
    int ga;
    double clip;
    bool frozen;  // [Note: frozen units]: the middle unit frozen
  };
  for (const Case c : {Case{1, 0.0, false}, Case{1, 0.05, false}, Case{2, 0.0, false},
                       Case{2, 0.05, false}, Case{1, 0.0, true}, Case{2, 0.05, true}}) {
    const int ga = c.ga;
    const double clip = c.clip;
    {
      std::vector<uint64_t> digests;
      for (int stage = 0; stage <= 3; ++stage) {
        RunSpec spec;
        spec.world = 3;  // no unit size is a multiple of 3 * 16
        spec.config = BaseConfig(stage);
        spec.config.gradient_accumulation_steps = ga;
        spec.config.gradient_clipping = clip;
        spec.config.zero_optimization.reduce_bucket_size = 100;     // many buckets per unit
        spec.config.zero_optimization.allgather_bucket_size = 300;  // stages 1/2 wait between units
        spec.config.zero_optimization.overlap_comm = stage % 2 == 1;
        spec.config.zero_optimization.stage3_max_live_parameters = 600;
        spec.config.zero_optimization.stage3_prefetch_bucket_size = 500;
        spec.config.zero_optimization.stage3_param_persistence_threshold = 100;  // last unit
        if (c.frozen) spec.frozen_units = {"layer.1"};
        auto r = Train(spec);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        if (clip > 0) {
          EXPECT_LT(r->steps[0].clip_coef, 1.0) << "clipping must engage";
        }
        digests.push_back(r->digest);
      }
      for (int stage = 1; stage <= 3; ++stage) {
        EXPECT_EQ(digests[stage], digests[0])
            << "stage " << stage << " ga " << ga << " clip " << clip << " frozen " << c.frozen;
      }
    }
  }
}

TEST(TanhMlp, GradientMatchesFiniteDifferences) {
  TanhMlp model({6, 9, 4});
  DenseUnitAccess dense(model.Spec(), model.Init(3));
  std::vector<float> x, y;
  FillBatch(model, 0, 0, 0, 1, 3, x, y);
  dense.ZeroGrads();
  ASSERT_TRUE(model.ForwardBackward(dense, x, y, 3).ok());
  for (int u = 0; u < 2; ++u) {
    for (int p = 0; p < 2; ++p) {
      std::span<float> w = dense.ParamData(u, p);
      for (size_t i = 0; i < w.size(); i += 5) {
        const float saved = w[i];
        const float h = 1e-2f;
        w[i] = saved + h;
        const double up = *model.ForwardBackward(dense, x, y, 3);
        w[i] = saved - h;
        const double down = *model.ForwardBackward(dense, x, y, 3);
        w[i] = saved;
        dense.ZeroGrads();
        ASSERT_TRUE(model.ForwardBackward(dense, x, y, 3).ok());
        const double fd = (up - down) / (2 * h);
        EXPECT_NEAR(dense.GradData(u, p)[i], fd, 2e-3 + 2e-2 * std::abs(fd))
            << "unit " << u << " param " << p << " element " << i;
      }
    }
  }
}

TEST(ZeroEngine, EveryOptimizerIsBitIdenticalAcrossStages) {
  for (OptimizerType type :
       {OptimizerType::kAdam, OptimizerType::kSgd, OptimizerType::kAdagrad, OptimizerType::kLion}) {
    std::vector<uint64_t> digests;
    for (int stage : {0, 2, 3}) {
      RunSpec spec;
      spec.world = 3;
      spec.config = BaseConfig(stage);
      spec.config.optimizer.type = type;
      spec.config.optimizer.adam_w_mode = type != OptimizerType::kAdam;  // Adam: L2 (AdamW: the others)
      spec.config.optimizer.momentum = type == OptimizerType::kSgd ? 0.9 : 0.0;
      spec.config.optimizer.nesterov = type == OptimizerType::kSgd;
      spec.config.optimizer.initial_accumulator_value = 0.1;
      spec.config.optimizer.betas = {0.9, 0.99};
      spec.config.optimizer.lr = type == OptimizerType::kLion ? 1e-3 : 1e-2;
      spec.config.zerostack.optimizer_threads = 2;
      auto r = Train(spec);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      digests.push_back(r->digest);
    }
    EXPECT_EQ(digests[1], digests[0]) << "optimizer " << int(type);
    EXPECT_EQ(digests[2], digests[0]) << "optimizer " << int(type);
  }
}

TEST(ZeroEngine, ReducedPrecisionStatesTrackFp32States) {
  RunSpec spec;
  spec.world = 2;
  spec.steps = 30;
  spec.micro_batch = 8;
  spec.config = BaseConfig(3);
  auto fp32 = Train(spec);
  ASSERT_TRUE(fp32.ok()) << fp32.status().ToString();
  for (OptimizerStateType t : {OptimizerStateType::kBF16, OptimizerStateType::kInt8}) {
    RunSpec low = spec;
    low.config.zerostack.optimizer_state_dtype = t;
    auto r = Train(low);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    double a = 0, b = 0;
    for (int k = 25; k < 30; ++k) a += fp32->losses[k], b += r->losses[k];
    EXPECT_NEAR(b, a, 0.1 * a) << "state dtype " << int(t);
    EXPECT_LT(r->losses.back(), r->losses.front());
  }
}

TEST(ZeroEngine, LossFalls) {
  RunSpec spec;
  spec.world = 2;
  spec.steps = 40;
  spec.micro_batch = 8;
  spec.config = BaseConfig(3);
  auto r = Train(spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  double first = 0, last = 0;
  for (int k = 0; k < 5; ++k) first += r->losses[k], last += r->losses[spec.steps - 1 - k];
  EXPECT_LT(last, 0.7 * first);
}

TEST(ZeroEngine, WorldSizesAgreeForTheSameGlobalBatch) {
  RunSpec one;
  one.world = 1;
  one.micro_batch = 12;
  one.config = BaseConfig(0);
  auto reference = Train(one);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  struct Split {
    int world, batch, ga, stage;
  };
  for (Split s : {Split{4, 3, 1, 3}, Split{2, 3, 2, 2}, Split{3, 2, 2, 1}}) {
    RunSpec spec;
    spec.world = s.world;
    spec.micro_batch = s.batch;
    spec.config = BaseConfig(s.stage);
    spec.config.gradient_accumulation_steps = s.ga;
    auto r = Train(spec);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->params.size(), reference->params.size());
    for (size_t p = 0; p < r->params.size(); ++p) {
      for (size_t i = 0; i < r->params[p].size(); ++i) {
        ASSERT_NEAR(r->params[p][i], reference->params[p][i], 2e-5)
            << "world " << s.world << " param " << p << " element " << i;
      }
    }
    for (size_t k = 0; k < r->losses.size(); ++k) {
      EXPECT_NEAR(r->losses[k], reference->losses[k], 1e-5 * (1 + reference->losses[k]));
    }
  }
}

TEST(ZeroEngine, LowPrecisionTracksFp32) {
  RunSpec spec;
  spec.world = 2;
  spec.steps = 8;
  spec.config = BaseConfig(3);
  auto fp32 = Train(spec);
  ASSERT_TRUE(fp32.ok()) << fp32.status().ToString();
  for (bool bf16 : {true, false}) {
    RunSpec low = spec;
    low.config.bf16.enabled = bf16;
    low.config.fp16.enabled = !bf16;
    auto r = Train(low);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (size_t k = 0; k < r->losses.size(); ++k) {
      EXPECT_NEAR(r->losses[k], fp32->losses[k], 0.03 * fp32->losses[k])
          << (bf16 ? "bf16" : "fp16") << " step " << k;
    }
  }
}

TEST(ZeroEngine, Fp16OverflowSkipsOnEveryRankAndLowersTheScale) {
  std::vector<uint64_t> digests;
  for (int stage : {0, 3}) {
    RunSpec spec;
    spec.world = 2;
    spec.steps = 12;
    spec.config = BaseConfig(stage);
    spec.config.fp16.enabled = true;
    spec.config.fp16.initial_scale_power = 24;  // gradients * 2^24 overflow fp16 at first
    spec.config.fp16.hysteresis = 1;
    auto r = Train(spec);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->steps[0].skipped);
    EXPECT_EQ(r->steps[0].loss_scale, float(1 << 24));
    EXPECT_EQ(r->steps[1].loss_scale, float(1 << 23));
    EXPECT_FALSE(r->steps.back().skipped) << "the scale must come down until steps succeed";
    EXPECT_GT(r->steps.back().step, 0);
    EXPECT_LT(r->steps.back().step, 12);
    for (size_t k = 1; k < r->steps.size(); ++k) {
      if (r->steps[k - 1].skipped) {
        EXPECT_EQ(r->steps[k].loss_scale, r->steps[k - 1].loss_scale / 2);
      }
    }
    digests.push_back(r->digest);
  }
  EXPECT_EQ(digests[0], digests[1]);
}

// Without fp16's loss scaling a non-finite gradient is a diverged run, not a step to skip:
// Step() fails on every rank at once, naming the step and the norm (before: a NaN loss
// trained on silently).
TEST(ZeroEngine, NonFiniteGradientStopsTheRunWithoutFp16) {
  for (int stage : {0, 3}) {
    for (bool bf16 : {false, true}) {
      RunSpec spec;
      spec.world = 2;
      spec.steps = 3;
      spec.config = BaseConfig(stage);
      spec.config.bf16.enabled = bf16;
      spec.nan_input_step = 1;
      auto r = Train(spec);
      ASSERT_FALSE(r.ok()) << "stage " << stage;
      EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
      EXPECT_THAT(r.status().message(), ::testing::HasSubstr("optimizer step 2"));
      EXPECT_THAT(r.status().message(), ::testing::HasSubstr("is nan"));
    }
  }
}

TEST(ZeroEngine, MemoryMatchesTheZeroFormulas) {
  // Mixed-precision Adam, psi parameters, N ranks: (2+2+12)psi, 4psi+12psi/N, 2psi+14psi/N,
  // 16psi/N bytes of parameters + gradients + optimizer states per rank.
  const int world = 4;
  const std::vector<int> widths = {300, 301, 299, 300, 302};
  const double psi = double(TanhMlp(widths).Spec().numel());
  const double expected[4] = {16 * psi, 4 * psi + 12 * psi / world, 2 * psi + 14 * psi / world,
                              16 * psi / world};
  for (int stage = 0; stage <= 3; ++stage) {
    RunSpec spec;
    spec.widths = widths;
    spec.world = world;
    spec.steps = 1;
    spec.micro_batch = 2;
    spec.config = BaseConfig(stage);
    spec.config.bf16.enabled = true;
    spec.config.zero_optimization.stage3_param_persistence_threshold = 0;
    auto r = Train(spec);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (int rank = 0; rank < world; ++rank) {
      const MemorySnapshot& m = r->memory[rank];
      const double measured = double(m.Peak(MemoryTier::kDevice, MemoryCategory::kParameters) +
                                     m.Peak(MemoryTier::kDevice, MemoryCategory::kGradients) +
                                     m.Peak(MemoryTier::kDevice, MemoryCategory::kOptimizerStates));
      EXPECT_NEAR(measured / expected[stage], 1.0, 0.05)
          << "stage " << stage << " rank " << rank << ": measured " << measured << " expected "
          << expected[stage];
    }
  }
}

TEST(ZeroEngine, Stage3HoldsAtMostMaxLiveParametersPlusOneUnit) {
  RunSpec spec;
  spec.widths = {40, 41, 39, 40, 42, 40, 41};  // 6 units of ~1.6k elements
  spec.world = 2;
  spec.steps = 3;
  spec.config = BaseConfig(3);
  spec.config.zero_optimization.stage3_max_live_parameters = 3500;
  spec.config.zero_optimization.stage3_prefetch_bucket_size = 2000;
  spec.config.zero_optimization.stage3_param_persistence_threshold = 0;
  auto r = Train(spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  int64_t largest = 0;
  for (const UnitSpec& u : TanhMlp(spec.widths).Spec().units)
    largest = std::max(largest, u.numel());
  // Gathered buffers hold padded units: allow the padding of one shard per rank per unit.
  const int64_t bound = (3500 + largest + 2 * 16 * 2) * int64_t(sizeof(float));
  for (const MemorySnapshot& m : r->memory) {
    const int64_t peak = m.Peak(MemoryTier::kDevice, MemoryCategory::kGatheredParameters);
    EXPECT_GT(peak, 0);
    EXPECT_LE(peak, bound);
    EXPECT_EQ(m.Current(MemoryTier::kDevice, MemoryCategory::kGatheredParameters), 0);
  }
  EXPECT_GT(r->gather.prefetch_hits, 0) << "steps after the first replay the trace";
  EXPECT_LE(r->gather.peak_live_elements, 3500 + largest + 2 * 16 * 2);
}

// A model whose units are independent vectors, used in a different order on some steps: the
// stage 3 trace must be invalidated safely and the results stay those of stage 0.
class ShuffledModel {
 public:
  ModelSpec Spec() const {
    ModelSpec spec;
    for (int u = 0; u < kUnits; ++u) {
      spec.units.push_back({"vec." + std::to_string(u), {{"w", {100 + 37 * u}, true}}});
    }
    return spec;
  }
  static ParamInit Init() {
    return [](int unit, int, std::span<float> v) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = Uniform(unit, i, 5);
    };
  }
  // loss = sum_u mean_i 0.5 (w_ui - target(step, u, i))^2, units visited in `order`.
  StatusOr<double> ForwardBackward(UnitAccess& access, int step, const std::vector<int>& order) {
    double loss = 0;
    std::vector<std::vector<float>> diff(kUnits);
    for (int u : order) {
      ZS_RETURN_IF_ERROR(access.BeginForward(u));
      std::span<const float> w = access.Param(u, 0);
      for (size_t i = 0; i < w.size(); ++i) {
        diff[u].push_back(w[i] - Uniform(step, u, i));
        loss += 0.5 * double(diff[u].back()) * diff[u].back() / double(w.size());
      }
      ZS_RETURN_IF_ERROR(access.EndForward(u));
    }
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      ZS_RETURN_IF_ERROR(access.BeginBackward(*it));
      std::span<float> g = access.Grad(*it, 0);
      for (size_t i = 0; i < g.size(); ++i) {
        g[i] += access.backward_scale() * diff[*it][i] / float(g.size());
      }
      ZS_RETURN_IF_ERROR(access.EndBackward(*it));
    }
    return loss;
  }
  static constexpr int kUnits = 5;
};

TEST(ZeroEngine, Stage3SurvivesAChangeOfExecutionOrder) {
  std::vector<uint64_t> digests;
  std::vector<GatherReport> reports(4);
  for (int stage : {0, 3}) {
    CommOptions options;
    std::mutex mu;
    Status status = RunLocalRanks(
        3, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
          ShuffledModel model;
          ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
          EngineConfig config = BaseConfig(stage);
          config.zero_optimization.stage3_param_persistence_threshold = 0;
          config.zero_optimization.stage3_max_live_parameters = 500;
          config.zero_optimization.stage3_prefetch_bucket_size = 400;
          ZS_ASSIGN_OR_RETURN(
              auto engine,
              ZeroEngine::Create(config, model.Spec(), ShuffledModel::Init(), *device, comm));
          const std::vector<int> forward = {0, 1, 2, 3, 4}, shuffled = {3, 0, 4, 1, 2};
          for (int step = 0; step < 6; ++step) {
            // Steps 0-2 record and replay one order; step 3 changes it; 4-5 replay the new one.
            const std::vector<int>& order = step < 3 ? forward : shuffled;
            ZS_RETURN_IF_ERROR(model.ForwardBackward(*engine, step, order).status());
            ZS_RETURN_IF_ERROR(engine->Step().status());
          }
          ZS_ASSIGN_OR_RETURN(uint64_t digest, engine->MasterDigest());
          std::lock_guard<std::mutex> lock(mu);
          if (rank == 0) {
            digests.push_back(digest);
            reports[stage] = engine->gather_report();
          }
          EXPECT_EQ(tracker.Current(MemoryTier::kDevice, MemoryCategory::kGatheredParameters), 0);
          return OkStatus();
        });
    ASSERT_TRUE(status.ok()) << status.ToString();
  }
  ASSERT_EQ(digests.size(), 2u);
  EXPECT_EQ(digests[0], digests[1]);
  EXPECT_EQ(reports[3].trace_invalidations, 1);
  EXPECT_GT(reports[3].prefetch_hits, 0);
}

TEST(ZeroEngine, StepRequiresEveryMicroBatch) {
  CommOptions options;
  Status status = RunLocalRanks(1, options, [](int, Communicator& comm, MemoryTracker& tracker) {
    TanhMlp model({5, 7, 3});
    auto device = CreateDevice("cpu", tracker);
    EngineConfig config = BaseConfig(2);
    config.gradient_accumulation_steps = 2;
    auto engine = ZeroEngine::Create(config, model.Spec(), model.Init(1), **device, comm);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    std::vector<float> x(5 * 2, 0.5f), y(3 * 2, 0.25f);
    EXPECT_TRUE(model.ForwardBackward(**engine, x, y, 2).ok());
    auto step = (*engine)->Step();
    EXPECT_FALSE(step.ok());
    EXPECT_NE(step.status().message().find("gradient_accumulation_steps is 2"), std::string::npos)
        << step.status().ToString();
    return OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
}

// [Note: parameter groups]: a group's hyper-parameters apply to its parameters only, stages
// 0-3 stay bit-identical with groups, and a group that repeats optimizer.params changes nothing.
TEST(ZeroEngine, ParamGroupsStepWithTheirOwnHyperParameters) {
  auto run = [](int stage, std::vector<ParamGroupConfig> groups) {
    RunSpec spec;
    spec.world = 3;
    spec.config = BaseConfig(stage);
    spec.config.zero_optimization.reduce_bucket_size = 100;
    spec.config.zerostack.param_groups = std::move(groups);
    spec.unit_groups = {{"layer.0", "input"}, {"layer.2", "head"}};
    auto r = Train(spec);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : RunResult{};
  };
  const std::vector<ParamGroupConfig> tuned = {
      {.name = "input", .lr_scale = 0.0},  // frozen
      {.name = "head", .lr_scale = 2.5, .betas = {{0.8, 0.99}}, .eps = 1e-4,
       .weight_decay = 0.5}};
  std::vector<RunResult> results;
  for (int stage = 0; stage <= 3; ++stage) results.push_back(run(stage, tuned));
  for (int stage = 1; stage <= 3; ++stage) {
    EXPECT_EQ(results[stage].digest, results[0].digest) << "stage " << stage;
  }
  // layer.0 (params 0, 1) is frozen: its values are the initial ones, bit for bit.
  RunSpec init_spec;
  init_spec.steps = 0;
  auto init = Train(init_spec);
  ASSERT_TRUE(init.ok()) << init.status().ToString();
  const RunResult plain = run(0, {});
  for (int p : {0, 1}) EXPECT_EQ(results[0].params[p], init->params[p]) << "param " << p;
  // layer.1 (params 2, 3), in no group, trains; layer.2 (params 4, 5) steps with the head
  // group's values, so it ends elsewhere than without groups.
  EXPECT_NE(results[0].params[2], init->params[2]);
  EXPECT_NE(results[0].params[4], plain.params[4]);
  // Groups that repeat optimizer.params are no groups at all.
  const RunResult same = run(2, {{.name = "input"}, {.name = "head"}});
  EXPECT_EQ(same.digest, plain.digest);
}

// DeepSpeed's OneCycle moves Adam's betas ((momentum, 0.99), for every group): the engine
// must step with them. With a flat cycle (min = max for the lr and for beta1) the scheduled run
// equals a run without a scheduler whose optimizer has those betas, bit for bit, at every
// stage, and differs from the optimizer's own betas.
TEST(ZeroEngine, OneCycleStepsWithItsBetas) {
  using Betas = std::array<double, 2>;
  auto run = [](int stage, bool one_cycle, Betas betas, Betas head_betas) {
    RunSpec spec;
    spec.world = 2;
    spec.config = BaseConfig(stage);
    spec.config.optimizer.betas = betas;
    spec.config.zerostack.param_groups = {{.name = "head", .betas = head_betas}};
    spec.unit_groups = {{"layer.2", "head"}};
    if (one_cycle) {
      SchedulerConfig& s = spec.config.scheduler;
      s.type = SchedulerType::kOneCycle;
      s.cycle_min_lr = s.cycle_max_lr = spec.config.optimizer.lr;
      s.cycle_first_step_size = 2;
      s.cycle_min_mom = s.cycle_max_mom = 0.8;
    }
    auto r = Train(spec);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->digest : 0;
  };
  const uint64_t scheduled = run(0, true, {0.9, 0.999}, {0.7, 0.9});
  EXPECT_EQ(scheduled, run(0, false, {0.8, 0.99}, {0.8, 0.99}));
  EXPECT_NE(scheduled, run(0, false, {0.8, 0.99}, {0.7, 0.9}));  // the group's betas too
  EXPECT_NE(scheduled, run(0, false, {0.9, 0.999}, {0.7, 0.9}));
  for (int stage = 1; stage <= 3; ++stage) {
    EXPECT_EQ(run(stage, true, {0.9, 0.999}, {0.7, 0.9}), scheduled) << "stage " << stage;
  }
}

// DeepSpeed's "Adam" decouples the weight decay unless adam_w_mode is false: by default it
// steps as "AdamW", bit for bit, and with adam_w_mode false as Adam with L2 (another result,
// since BaseConfig's weight decay is 0.1).
TEST(ZeroEngine, AdamFollowsDeepSpeedsAdamWMode) {
  auto run = [](OptimizerType type, bool adam_w_mode) {
    RunSpec spec;
    spec.world = 2;
    spec.config = BaseConfig(2);
    spec.config.optimizer.type = type;
    spec.config.optimizer.adam_w_mode = adam_w_mode;
    auto r = Train(spec);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->digest : 0;
  };
  const uint64_t adamw = run(OptimizerType::kAdamW, true);
  EXPECT_EQ(run(OptimizerType::kAdam, true), adamw);
  EXPECT_NE(run(OptimizerType::kAdam, false), adamw);
  EXPECT_EQ(run(OptimizerType::kAdamW, false), adamw);  // AdamW always decouples
}

TEST(ZeroEngine, ParamGroupThatNamesNoParameterIsAnError) {
  RunSpec spec;
  spec.world = 2;
  spec.config = BaseConfig(3);
  spec.config.zerostack.param_groups = {{.name = "head"}, {.name = "embeddings"}};
  spec.unit_groups = {{"layer.2", "head"}};
  auto r = Train(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find("zerostack.param_groups[1]"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("\"embeddings\""), std::string::npos);
  EXPECT_NE(r.status().message().find("the model's groups: head"), std::string::npos)
      << r.status().ToString();
}

TEST(ZeroEngine, RejectsWhatItCannotRun) {
  CommOptions options;
  Status status = RunLocalRanks(2, options, [](int, Communicator& comm, MemoryTracker& tracker) {
    TanhMlp model({5, 7, 3});
    auto device = CreateDevice("cpu", tracker);
    EngineConfig config = BaseConfig(2);
    config.zero_optimization.reduce_scatter = false;
    auto engine = ZeroEngine::Create(config, model.Spec(), model.Init(1), **device, comm);
    EXPECT_FALSE(engine.ok());
    EXPECT_NE(engine.status().message().find("reduce_scatter"), std::string::npos);
    config = BaseConfig(1);
    config.train_batch_size = 7;
    engine = ZeroEngine::Create(config, model.Spec(), model.Init(1), **device, comm);
    EXPECT_FALSE(engine.ok());
    // A config changed after parsing is checked again: offload at stage 0 has nothing to move.
    config = BaseConfig(0);
    config.zero_optimization.offload_optimizer.device = OffloadDevice::kCpu;
    engine = ZeroEngine::Create(config, model.Spec(), model.Init(1), **device, comm);
    EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(engine.status().message().find("offload_optimizer.device"), std::string::npos);
    return OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
}

TEST(ZeroEngine, OptimizerSummaryNamesWhatSteps) {
  CommOptions options;
  Status status = RunLocalRanks(1, options, [](int, Communicator& comm, MemoryTracker& tracker) {
    TanhMlp model({5, 7, 3});
    auto device = CreateDevice("cpu", tracker);
    EngineConfig config = BaseConfig(1);
    config.optimizer.type = OptimizerType::kLion;
    config.zerostack.optimizer_state_dtype = OptimizerStateType::kBF16;
    config.zerostack.optimizer_threads = 2;
    auto engine = ZeroEngine::Create(config, model.Spec(), model.Init(1), **device, comm);
    ZS_RETURN_IF_ERROR(engine.status());
    const std::string auto_prefetch = CpuOptimizer::AutoPrefetchesOnThisCpu()
                                          ? "prefetch auto (256 on this CPU)"
                                          : "prefetch auto (none on this CPU)";
    // Units of 5*7+7 and 7*3+3 parameters, padded to 48 and 32 (zerostack.alignment 16): 80
    // elements of master 4 + grad 4 + param 4 + momentum 2 bytes, 1120 B.
    const std::string limit = FormatBytes(CpuOptimizer::CacheResidentLimitBytes());
    const std::string prefetching =
        CpuOptimizer::AutoPrefetchesOnThisCpu() ? "prefetch 256" : "no prefetch";
    EXPECT_EQ((*engine)->optimizer_summary(),
              "Lion, bf16 states, CPU kernels " + CpuOptimizer::SimdTarget() + " x 2 threads, " +
                  auto_prefetch + "; this rank's 1.1 KiB of optimizer arrays fit the " + limit +
                  " cache-resident limit: cached param_out, " + prefetching);
    // Beyond the limit (set to 0 here) the step streams param_out: the engine decides on the
    // rank's units together, which are smaller than any cache.
    config.zerostack.optimizer_cache_resident_bytes = 0;
    engine = ZeroEngine::Create(config, model.Spec(), model.Init(1), **device, comm);
    ZS_RETURN_IF_ERROR(engine.status());
    EXPECT_EQ((*engine)->optimizer_summary(),
              "Lion, bf16 states, CPU kernels " + CpuOptimizer::SimdTarget() + " x 2 threads, " +
                  auto_prefetch +
                  "; this rank's 1.1 KiB of optimizer arrays exceed the 0 B cache-resident limit: "
                  "streamed param_out, " +
                  prefetching);
    for (int64_t limit_bytes : {int64_t{1119}, int64_t{1120}}) {  // the boundary
      config.zerostack.optimizer_cache_resident_bytes = limit_bytes;
      engine = ZeroEngine::Create(config, model.Spec(), model.Init(1), **device, comm);
      ZS_RETURN_IF_ERROR(engine.status());
      const std::string summary = (*engine)->optimizer_summary();
      EXPECT_NE(summary.find(limit_bytes == 1120 ? "arrays fit the 1.1 KiB cache-resident limit: "
                                                   "cached param_out"
                                                 : "arrays exceed the 1.1 KiB cache-resident "
                                                   "limit: streamed param_out"),
                std::string::npos)
          << summary;
    }
    config.optimizer.type = OptimizerType::kAdamW;
    config.zerostack.optimizer_state_dtype = OptimizerStateType::kF32;
    config.zerostack.optimizer_threads = 1;
    config.zerostack.optimizer_cache_resident_bytes = 0;
    for (int64_t prefetch : {int64_t{0}, int64_t{512}}) {
      config.zerostack.optimizer_prefetch = prefetch;
      engine = ZeroEngine::Create(config, model.Spec(), model.Init(1), **device, comm);
      ZS_RETURN_IF_ERROR(engine.status());
      // A set distance holds whatever the working set.
      EXPECT_EQ((*engine)->optimizer_summary(),
                "AdamW, fp32 states, CPU kernels " + CpuOptimizer::SimdTarget() + " x 1 thread, " +
                    (prefetch == 0 ? "no prefetch" : "prefetch 512") +
                    "; this rank's 1.6 KiB of optimizer arrays exceed the 0 B cache-resident "
                    "limit: streamed param_out, " +
                    (prefetch == 0 ? "no prefetch" : "prefetch 512"));
    }
    return OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
}

}  // namespace
}  // namespace zs
