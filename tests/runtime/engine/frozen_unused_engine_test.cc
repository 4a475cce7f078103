// Frozen parameters and units a micro-batch leaves out, ranks as threads:
// - [Note: frozen units] (zero_engine.h): a frozen unit trains the rest exactly as lr_scale 0 on
//   it does, stages 0-3 bit-identical, under offload too; the tracker shows no gradient and no
//   optimizer state for it; it is outside the norm and the fp16 overflow check; checkpoint
//   state round-trips; a unit mixing frozen and trainable parameters trains, keeps the memory
//   of a trainable unit and says so (mixed_frozen_engine_test.cc tests it in depth).
// - [Note: unused units]: with zerostack.allow_unused_units, ranks leaving different units out
//   of different micro-batches train to the bits of a one-rank reference whose gradient of
//   those units is zero there, stages 0-3 (gradients are multiples of 2^-9, so every sum is
//   exact and the order of the additions cannot matter); without it, Step() names the unit.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/engine/zero_engine.h"
#include "runtime/sharding/shard_layout.h"
#include "tests/runtime/engine/engine_test_support.h"

namespace zs {
namespace {

using testing_support::BaseConfig;
using testing_support::RunResult;
using testing_support::RunSpec;
using testing_support::Train;

// ---- Frozen units on the tanh MLP (engine_test_support.h) --------------------------------

RunSpec MlpSpec(int stage) {
  RunSpec spec;
  spec.world = 3;
  spec.steps = 3;
  spec.config = BaseConfig(stage);
  spec.config.gradient_accumulation_steps = 2;
  spec.config.zero_optimization.reduce_bucket_size = 100;
  spec.config.zero_optimization.stage3_param_persistence_threshold = 100;
  return spec;
}

TEST(FrozenUnits, TrainTheRestAsLrScaleZeroWithoutGradientsOrStates) {
  const examples::TanhMlp model(MlpSpec(0).widths);
  const UnitSpec frozen = model.Spec().units[1];
  std::vector<int64_t> sizes;
  for (const ParamSpec& p : frozen.params) sizes.push_back(p.numel());
  const ShardLayout layout = ShardLayout::Create(sizes, 3, 16).value();
  uint64_t stage0 = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(fmt::format("stage {}", stage));
    RunSpec reference = MlpSpec(stage);
    reference.unit_groups = {{frozen.name, "still"}};
    ParamGroupConfig still;
    still.name = "still";
    still.lr_scale = 0.0;
    reference.config.zerostack.param_groups = {still};
    RunSpec spec = MlpSpec(stage);
    spec.frozen_units = {frozen.name};
    auto ref = Train(reference);
    auto got = Train(spec);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    // Without clipping the frozen unit's gradient changes nothing else: the same bits.
    ASSERT_EQ(got->params.size(), ref->params.size());
    for (size_t p = 0; p < ref->params.size(); ++p) EXPECT_EQ(got->params[p], ref->params[p]);
    // The frozen parameters are their initial values.
    std::vector<float> init(size_t(frozen.params[0].numel()));
    model.Init(7)(1, 0, init);
    EXPECT_EQ(got->params[2], init);
    EXPECT_EQ(got->digest, ref->digest);
    if (stage == 0) stage0 = got->digest;
    EXPECT_EQ(got->digest, stage0);
    // No gradient and no optimizer state for the frozen unit, exactly, on every rank.
    const int64_t grad_elements = stage >= 2 ? layout.shard_size() : layout.padded_size();
    const int64_t opt_elements = stage == 0 ? layout.padded_size() : layout.shard_size();
    for (int r = 0; r < 3; ++r) {
      const MemorySnapshot& a = ref->memory[size_t(r)];
      const MemorySnapshot& b = got->memory[size_t(r)];
      EXPECT_EQ(a.Peak(MemoryTier::kDevice, MemoryCategory::kGradients) -
                    b.Peak(MemoryTier::kDevice, MemoryCategory::kGradients),
                grad_elements * 4);
      EXPECT_EQ(a.Peak(MemoryTier::kDevice, MemoryCategory::kOptimizerStates) -
                    b.Peak(MemoryTier::kDevice, MemoryCategory::kOptimizerStates),
                3 * ((opt_elements * 4 + 255) / 256 * 256));  // AdamW: fp32 master, m, v;
                                                              // each array 256-byte aligned
      EXPECT_EQ(a.Peak(MemoryTier::kDevice, MemoryCategory::kParameters),
                b.Peak(MemoryTier::kDevice, MemoryCategory::kParameters));
    }
  }
}

TEST(FrozenUnits, OffloadTiersGiveTheInMemoryBits) {
  const std::string dir = fmt::format("{}/zs_frozen_{}", ::testing::TempDir(), getpid());
  std::filesystem::create_directories(dir);
  auto run = [&](int stage, OffloadDevice optimizer, OffloadDevice params) {
    RunSpec spec = MlpSpec(stage);
    spec.frozen_units = {"layer.0"};
    auto& z = spec.config.zero_optimization;
    z.offload_optimizer.device = optimizer;
    z.offload_optimizer.nvme_path = dir;
    z.offload_param.device = params;
    z.offload_param.nvme_path = dir;
    auto r = Train(spec);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->digest : 0;
  };
  const uint64_t in_memory = run(3, OffloadDevice::kNone, OffloadDevice::kNone);
  EXPECT_EQ(run(2, OffloadDevice::kCpu, OffloadDevice::kNone), in_memory);
  EXPECT_EQ(run(3, OffloadDevice::kNvme, OffloadDevice::kNvme), in_memory);
  EXPECT_EQ(run(3, OffloadDevice::kCpu, OffloadDevice::kCpu), in_memory);
  std::filesystem::remove_all(dir);
}

// A unit mixing frozen and trainable parameters trains (mixed_frozen_engine_test.cc has the
// rest): the frozen parameter keeps its values, the others train, the unit keeps the gradient
// and optimizer memory of a wholly trainable one, and Create's log line names the unit, the
// frozen parameter and the advice.
TEST(FrozenUnits, AUnitMixingFrozenAndTrainableParametersTrainsAndSaysWhatItKeeps) {
  std::vector<MemorySnapshot> memory;
  std::string log;
  Status status = RunLocalRanks(
      1, {},
      [&](int, Communicator& comm, MemoryTracker& tracker) -> Status {
        examples::TanhMlp model({4, 6, 3});
        ModelSpec mixed = model.Spec();
        mixed.units[1].params[1].trainable = false;
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        ::testing::internal::CaptureStderr();
        auto engine = ZeroEngine::Create(BaseConfig(2), mixed, model.Init(1), *device, comm);
        log = ::testing::internal::GetCapturedStderr();
        ZS_RETURN_IF_ERROR(engine.status());
        const int64_t grads =
            tracker.Snapshot().Current(MemoryTier::kDevice, MemoryCategory::kGradients);
        const int64_t states =
            tracker.Snapshot().Current(MemoryTier::kDevice, MemoryCategory::kOptimizerStates);
        {  // The same model with every parameter trainable keeps exactly as much.
          ZS_ASSIGN_OR_RETURN(auto all, ZeroEngine::Create(BaseConfig(2), model.Spec(),
                                                           model.Init(1), *device, comm));
          const MemorySnapshot both = tracker.Snapshot();
          EXPECT_EQ(both.Current(MemoryTier::kDevice, MemoryCategory::kGradients), 2 * grads);
          EXPECT_EQ(both.Current(MemoryTier::kDevice, MemoryCategory::kOptimizerStates),
                    2 * states);
        }
        std::vector<float> x(8 * 4), y(8 * 3);
        for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * float(int(i % 7) - 3);
        for (size_t i = 0; i < y.size(); ++i) y[i] = 0.2f * float(int(i % 5) - 2);
        ZeroEngine& e = **engine;
        ZS_RETURN_IF_ERROR(model.ForwardBackward(e, x, y, 8).status());
        ZS_RETURN_IF_ERROR(e.Step().status());
        for (int p = 0; p < 2; ++p) {
          std::vector<float> init(size_t(mixed.units[1].params[size_t(p)].numel()));
          model.Init(1)(1, p, init);
          ZS_ASSIGN_OR_RETURN(std::vector<float> now, e.GatherMasterParam(1, p));
          if (p == 1) {
            EXPECT_EQ(now, init) << "the frozen parameter keeps its values";
          } else {
            EXPECT_NE(now, init) << "the trainable one trains";
          }
        }
        return OkStatus();
      },
      &memory);
  ASSERT_TRUE(status.ok()) << status.ToString();
  const examples::TanhMlp model({4, 6, 3});
  const UnitSpec unit = model.Spec().units[1];
  EXPECT_NE(log.find(fmt::format("unit '{}' mixes frozen parameters ({})", unit.name,
                                 unit.params[1].name)),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("a unit of their own"), std::string::npos) << log;
}

// ---- Toy units with hand-written gradients -----------------------------------------------

constexpr int kUnits = 4;

ModelSpec ToySpec() {
  ModelSpec spec;
  for (int u = 0; u < kUnits; ++u) {
    spec.units.push_back(
        UnitSpec{fmt::format("u{}", u), {ParamSpec{"w", {17 + 9 * u}}, ParamSpec{"b", {3 + u}}}});
  }
  return spec;
}

ParamInit ToyInit(int seed) {
  return [seed](int unit, int param, std::span<float> values) {
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = 0.01f * float((unit * 7 + param * 3 + int(i) + seed) % 13) - 0.05f;
    }
  };
}

// A multiple of 1/64 in [-11/64, 11/64]: times backward_scale (1/4 or 1/8 here) every sum of
// the test is exact in fp32, and every sum of squares in fp64.
float RawGrad(int unit, int param, int64_t i, int sample, int step) {
  return float((unit * 31 + param * 17 + int(i) * 5 + sample * 11 + step * 3) % 23 - 11) / 64.0f;
}

// Which units rank `rank` leaves out of micro-batch `micro` of `step` (at most 3 of 4).
bool Skips(int step, int micro, int rank, int unit) {
  if (step == 1 && micro == 0 && unit == 2) return true;                          // every rank
  if (rank == 0 && micro == 1 && (unit == kUnits - 1 || unit == 0)) return true;  // both ends
  return (step + micro + rank) % 5 == unit;
}

struct ToyRun {
  int world = 1;
  int ga = 2;
  int stage = 0;
  int steps = 3;
  bool allow_unused = true;
  bool reduce_per_step = false;
  bool fp16 = false;
  double clip = 0.05;
  std::set<int> frozen;
  // The micro-batch plays sample (micro * world + rank) of a `samples_world` run: a one-rank
  // reference replays a multi-rank run's samples in order.
  int samples_world = 0;
  std::function<bool(int step, int micro, int sample, int unit)> skip;  // leave out
  std::function<bool(int step, int micro, int sample, int unit)> zero;  // run, no gradient
  bool inf_in_frozen = false;  // write +inf into the frozen units' Grad
};

struct ToyResult {
  uint64_t digest = 0;
  std::vector<StepResult> steps;  // rank 0's
  Status step_error;              // rank 0's first Step() error
  std::vector<MemorySnapshot> memory;
};

Status MicroBatch(ZeroEngine& e, const ToyRun& run, int step, int micro, int sample) {
  const float scale = e.backward_scale();
  auto left_out = [&](int u) { return run.skip && run.skip(step, micro, sample, u); };
  for (int u = 0; u < kUnits; ++u) {
    if (left_out(u)) continue;
    ZS_RETURN_IF_ERROR(e.BeginForward(u));
    ZS_RETURN_IF_ERROR(e.EndForward(u));
  }
  // Odd samples at odd steps run backward in unit order: units wait for the ones above.
  // (Only in the agreed order of allow_unused_units: otherwise ranks would reduce in different
  // orders.)
  const bool upward = run.allow_unused && sample % 2 == 1 && step % 2 == 1;
  for (int k = 0; k < kUnits; ++k) {
    const int u = upward ? k : kUnits - 1 - k;
    if (left_out(u)) continue;
    ZS_RETURN_IF_ERROR(e.BeginBackward(u));
    const bool zero = run.zero && run.zero(step, micro, sample, u);
    for (int p = 0; p < 2 && !zero; ++p) {
      std::span<float> g = e.Grad(u, p);
      for (size_t i = 0; i < g.size(); ++i) {
        g[i] += run.frozen.count(u) && run.inf_in_frozen
                    ? std::numeric_limits<float>::infinity()
                    : RawGrad(u, p, int64_t(i), sample, step) * scale;
      }
    }
    ZS_RETURN_IF_ERROR(e.EndBackward(u));
  }
  return OkStatus();
}

ToyResult TrainToy(const ToyRun& run) {
  ToyResult result;
  std::mutex mu;
  CommOptions options;
  options.timeout = std::chrono::milliseconds(20'000);
  EngineConfig config;
  config.zero_optimization.stage = run.stage;
  config.zero_optimization.reduce_bucket_size = 40;
  config.optimizer.lr = 1e-2;
  config.optimizer.weight_decay = 0.1;
  config.gradient_accumulation_steps = run.ga;
  config.gradient_clipping = run.clip;
  config.fp16.enabled = run.fp16;
  config.zerostack.allow_unused_units = run.allow_unused;
  ModelSpec spec = ToySpec();
  for (int u : run.frozen) {
    for (ParamSpec& p : spec.units[size_t(u)].params) p.trainable = false;
  }
  const int samples_world = run.samples_world > 0 ? run.samples_world : run.world;
  Status status = RunLocalRanks(
      run.world, options,
      [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        EngineParallelism parallel;
        parallel.reduce_per_step = run.reduce_per_step;
        ZS_ASSIGN_OR_RETURN(auto engine, ZeroEngine::Create(config, spec, ToyInit(0), *device, comm,
                                                            nullptr, parallel));
        for (int step = 0; step < run.steps; ++step) {
          for (int m = 0; m < run.ga; ++m) {
            const int sample = m * run.world + rank;
            // The sample's micro-batch and rank in the run it replays.
            ZS_RETURN_IF_ERROR(MicroBatch(*engine, run, step, sample / samples_world, sample));
          }
          auto r = engine->Step();
          if (!r.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            if (rank == 0) result.step_error = r.status();
            return OkStatus();
          }
          if (rank == 0) result.steps.push_back(*r);
        }
        ZS_ASSIGN_OR_RETURN(uint64_t digest, engine->MasterDigest());
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0) result.digest = digest;
        return OkStatus();
      },
      &result.memory);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return result;
}

// The skip pattern of a `world`-rank run, seen by sample (micro * world + rank).
std::function<bool(int, int, int, int)> SkipOf(int world) {
  return [world](int step, int micro, int sample, int unit) {
    return Skips(step, micro, sample % world, unit);
  };
}

TEST(UnusedUnits, RanksLeavingDifferentUnitsOutMatchAZeroGradientReference) {
  for (int world : {2, 4}) {
    // One rank replays every sample; the left-out units run and add nothing.
    ToyRun reference;
    reference.world = 1;
    reference.ga = 2 * world;
    reference.samples_world = world;
    reference.allow_unused = false;
    reference.zero = SkipOf(world);
    const ToyResult want = TrainToy(reference);
    ASSERT_TRUE(want.step_error.ok()) << want.step_error.ToString();
    ASSERT_NE(want.digest, 0u);
    EXPECT_LT(want.steps[0].clip_coef, 1.0) << "clipping must engage";
    for (bool per_step : {false, true}) {
      for (int stage = 0; stage <= 3; ++stage) {
        SCOPED_TRACE(fmt::format("world {} stage {} reduce_per_step {}", world, stage, per_step));
        ToyRun run;
        run.world = world;
        run.stage = stage;
        run.reduce_per_step = per_step;
        run.skip = SkipOf(world);
        const ToyResult got = TrainToy(run);
        ASSERT_TRUE(got.step_error.ok()) << got.step_error.ToString();
        EXPECT_EQ(got.digest, want.digest);
        EXPECT_EQ(got.steps.back().grad_norm, want.steps.back().grad_norm);
      }
    }
  }
}

TEST(UnusedUnits, StagesAreBitIdenticalAtAnInexactWorldSize) {
  uint64_t stage0 = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    ToyRun run;
    run.world = 3;  // backward_scale 1/6: sums round, so only the same order gives the same bits
    run.stage = stage;
    run.skip = SkipOf(3);
    run.frozen = {1};
    const ToyResult got = TrainToy(run);
    ASSERT_TRUE(got.step_error.ok()) << got.step_error.ToString();
    if (stage == 0) stage0 = got.digest;
    EXPECT_EQ(got.digest, stage0) << "stage " << stage;
  }
}

TEST(UnusedUnits, WithoutTheOptionStepNamesTheUnitAndTheOption) {
  for (int world : {1, 2}) {
    ToyRun run;
    run.world = world;
    run.stage = 2;
    run.steps = 1;
    run.allow_unused = false;
    // Every rank leaves u2 out of micro-batch 1 (so the collectives still match).
    run.skip = [](int, int micro, int, int unit) { return micro == 1 && unit == 2; };
    const ToyResult got = TrainToy(run);
    EXPECT_EQ(got.step_error.code(), StatusCode::kFailedPrecondition);
    const std::string message(got.step_error.message());
    EXPECT_NE(message.find("unit 'u2' completed 1 micro-batches"), std::string::npos) << message;
    EXPECT_NE(message.find("zerostack.allow_unused_units"), std::string::npos) << message;
  }
}

TEST(UnusedUnits, AForwardAfterTheUnitsZeroGradientIsAnError) {
  Status status = RunLocalRanks(1, {}, [](int, Communicator& comm, MemoryTracker& tracker) {
    ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
    EngineConfig config;
    config.zerostack.allow_unused_units = true;
    ZS_ASSIGN_OR_RETURN(auto e, ZeroEngine::Create(config, ToySpec(), ToyInit(0), *device, comm));
    for (int u = 0; u < 3; ++u) {  // u3 left out
      ZS_RETURN_IF_ERROR(e->BeginForward(u));
      ZS_RETURN_IF_ERROR(e->EndForward(u));
    }
    ZS_RETURN_IF_ERROR(e->BeginBackward(2));
    ZS_RETURN_IF_ERROR(e->EndBackward(2));  // reduces u3's zeros, then u2
    Status late = e->BeginForward(3);
    EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(late.message().find("unit 'u3'"), std::string::npos) << late.ToString();
    return OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
}

// ---- Frozen units on toy gradients ---------------------------------------------------------

TEST(FrozenUnits, AreOutsideTheNormAndTheOverflowCheck) {
  for (bool fp16 : {false, true}) {
    for (int stage : {0, 3}) {
      SCOPED_TRACE(fmt::format("fp16 {} stage {}", fp16, stage));
      ToyRun run;
      run.world = 2;
      run.stage = stage;
      run.steps = 1;
      run.fp16 = fp16;
      run.allow_unused = false;
      run.frozen = {1, 2};
      run.inf_in_frozen = true;  // a frozen unit's Grad is scratch: whatever lands there is lost
      const ToyResult got = TrainToy(run);
      ASSERT_TRUE(got.step_error.ok()) << got.step_error.ToString();
      ASSERT_EQ(got.steps.size(), 1u);
      EXPECT_FALSE(got.steps[0].skipped);
      double sum = 0;  // float64 reference over the trainable units only
      const ModelSpec spec = ToySpec();
      for (int u : {0, 3}) {
        for (int p = 0; p < 2; ++p) {
          for (int64_t i = 0; i < spec.units[size_t(u)].params[size_t(p)].numel(); ++i) {
            double g = 0;
            for (int sample = 0; sample < 4; ++sample) g += RawGrad(u, p, i, sample, 0);
            sum += (g / 4) * (g / 4);
          }
        }
      }
      EXPECT_NEAR(got.steps[0].grad_norm, std::sqrt(sum), 1e-9);
    }
  }
}

// [Note: frozen units] Checkpoints: a frozen parameter is saved as its values alone, loads back
// into an engine built from other values, and the run goes on with the same bits.
TEST(FrozenUnits, CheckpointStateRoundTrips) {
  for (int stage : {0, 1, 3}) {
    SCOPED_TRACE(fmt::format("stage {}", stage));
    EngineConfig config;
    config.zero_optimization.stage = stage;
    config.optimizer.lr = 1e-2;
    ModelSpec spec = ToySpec();
    for (ParamSpec& p : spec.units[2].params) p.trainable = false;
    ToyRun run;
    run.world = 2;
    run.allow_unused = false;
    run.frozen = {2};
    std::mutex mu;
    std::map<std::tuple<int, int, int64_t>, OwnedParamState> saved;  // every rank's parts
    uint64_t digests[2] = {0, 0};
    Status status =
        RunLocalRanks(2, {}, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
          ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
          ZS_ASSIGN_OR_RETURN(auto a, ZeroEngine::Create(config, spec, ToyInit(0), *device, comm));
          ZS_ASSIGN_OR_RETURN(auto b, ZeroEngine::Create(config, spec, ToyInit(5), *device, comm));
          auto train = [&](ZeroEngine& e, int step) -> Status {
            ZS_RETURN_IF_ERROR(MicroBatch(e, run, step, 0, rank));
            return e.Step().status();
          };
          for (int step = 0; step < 2; ++step) ZS_RETURN_IF_ERROR(train(*a, step));
          std::map<std::tuple<int, int, int64_t>, OwnedParamState> mine;
          ZS_RETURN_IF_ERROR(a->VisitOwnedState([&](const OwnedParamState& st) {
            EXPECT_EQ(st.arrays.size(), st.unit == 2 ? 1u : 3u) << "unit " << st.unit;
            mine[{st.unit, st.param, st.begin}] = st;
            return OkStatus();
          }));
          {
            std::lock_guard<std::mutex> lock(mu);
            saved.insert(mine.begin(), mine.end());
          }
          ZS_RETURN_IF_ERROR(a->AllReduceMean(0.0).status());  // every rank's parts are in
          // The frozen values are saved as they are: the initial ones.
          for (const auto& [key, st] : mine) {
            if (st.unit != 2) continue;
            std::vector<float> init(size_t(spec.units[2].params[size_t(st.param)].numel()));
            ToyInit(0)(2, st.param, init);
            for (int64_t i = st.begin; i < st.end; ++i) {
              float x;
              std::memcpy(&x, st.arrays[0].data.data() + (i - st.begin) * 4, 4);
              EXPECT_EQ(x, init[size_t(i)]) << "param " << st.param << " element " << i;
            }
          }
          ZS_RETURN_IF_ERROR(b->LoadOwnedState(
              [&](const OwnedStateRequest& req) -> StatusOr<OwnedParamState> {
                // The saved parts (every rank's, disjoint, fp32 arrays) cut to the request.
                OwnedParamState out;
                out.unit = req.unit;
                out.param = req.param;
                out.begin = req.begin;
                out.end = req.end;
                out.arrays.resize(size_t(1 + req.num_states));
                int64_t at = req.begin;
                for (auto it = saved.lower_bound({req.unit, req.param, 0});
                     it != saved.end() && std::get<0>(it->first) == req.unit &&
                     std::get<1>(it->first) == req.param;
                     ++it) {
                  const OwnedParamState& st = it->second;
                  if (int(st.arrays.size()) != 1 + req.num_states) {
                    return InvalidArgumentError("saved with other arrays");
                  }
                  const int64_t b = std::max(at, st.begin), e = std::min(req.end, st.end);
                  if (b >= e) continue;
                  if (b != at) return NotFoundError("a gap");
                  for (size_t k = 0; k < st.arrays.size(); ++k) {
                    out.arrays[k].kind = st.arrays[k].kind;
                    out.arrays[k].dtype = st.arrays[k].dtype;
                    out.arrays[k].data.insert(out.arrays[k].data.end(),
                                              st.arrays[k].data.begin() + (b - st.begin) * 4,
                                              st.arrays[k].data.begin() + (e - st.begin) * 4);
                  }
                  at = e;
                }
                if (at != req.end) {
                  return NotFoundError(
                      fmt::format("unit {} param {} [{}, {})", req.unit, req.param, at, req.end));
                }
                return out;
              },
              a->training_state()));
          // Every rank sees the loaded frozen values in full (stages 1/2 all-gather them).
          ZS_RETURN_IF_ERROR(a->BeginEvaluation());
          ZS_RETURN_IF_ERROR(b->BeginEvaluation());
          for (int u = 0; u < kUnits; ++u) {
            ZS_RETURN_IF_ERROR(a->BeginForward(u));
            ZS_RETURN_IF_ERROR(b->BeginForward(u));
            for (int p = 0; p < 2; ++p) {
              std::span<const float> x = a->Param(u, p), y = b->Param(u, p);
              EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << "unit " << u;
            }
            ZS_RETURN_IF_ERROR(b->EndForward(u));
            ZS_RETURN_IF_ERROR(a->EndForward(u));
          }
          ZS_RETURN_IF_ERROR(b->EndEvaluation());
          ZS_RETURN_IF_ERROR(a->EndEvaluation());
          for (int step = 2; step < 4; ++step) {
            ZS_RETURN_IF_ERROR(train(*a, step));
            ZS_RETURN_IF_ERROR(train(*b, step));
          }
          ZS_ASSIGN_OR_RETURN(uint64_t da, a->MasterDigest());
          ZS_ASSIGN_OR_RETURN(uint64_t db, b->MasterDigest());
          std::lock_guard<std::mutex> lock(mu);
          if (rank == 0) digests[0] = da, digests[1] = db;
          return OkStatus();
        });
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_NE(digests[0], 0u);
    EXPECT_EQ(digests[0], digests[1]);
  }
}

// Through runtime/checkpoint: saved at stage 3, loaded at stage 1 (another layout of the same
// world): the master digest and the frozen unit's values come back.
TEST(FrozenUnits, CheckpointFilesLoadAtAnotherStage) {
  const std::string dir = fmt::format("{}/zs_frozen_ckpt_{}", ::testing::TempDir(), getpid());
  std::filesystem::remove_all(dir);
  ModelSpec spec = ToySpec();
  for (ParamSpec& p : spec.units[2].params) p.trainable = false;
  ToyRun run;
  run.world = 2;
  run.allow_unused = false;
  run.frozen = {2};
  std::mutex mu;
  uint64_t digests[2] = {0, 0};
  Status status =
      RunLocalRanks(2, {}, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        EngineConfig config;
        config.optimizer.lr = 1e-2;
        config.zero_optimization.stage = 3;
        ZS_ASSIGN_OR_RETURN(auto a, ZeroEngine::Create(config, spec, ToyInit(0), *device, comm));
        config.zero_optimization.stage = 1;
        ZS_ASSIGN_OR_RETURN(auto b, ZeroEngine::Create(config, spec, ToyInit(5), *device, comm));
        for (int step = 0; step < 2; ++step) {
          ZS_RETURN_IF_ERROR(MicroBatch(*a, run, step, 0, rank));
          ZS_RETURN_IF_ERROR(a->Step().status());
        }
        ZS_ASSIGN_OR_RETURN(std::string saved, SaveCheckpoint(*a, comm, dir));
        ZS_RETURN_IF_ERROR(LoadCheckpoint(*b, comm, saved).status());
        ZS_ASSIGN_OR_RETURN(uint64_t da, a->MasterDigest());
        ZS_ASSIGN_OR_RETURN(uint64_t db, b->MasterDigest());
        ZS_RETURN_IF_ERROR(b->BeginEvaluation());
        ZS_RETURN_IF_ERROR(b->BeginForward(2));
        std::vector<float> init(size_t(spec.units[2].params[0].numel()));
        ToyInit(0)(2, 0, init);
        std::span<const float> w = b->Param(2, 0);
        EXPECT_TRUE(std::equal(w.begin(), w.end(), init.begin(), init.end()));
        ZS_RETURN_IF_ERROR(b->EndForward(2));
        ZS_RETURN_IF_ERROR(b->EndEvaluation());
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0) digests[0] = da, digests[1] = db;
        return OkStatus();
      });
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_NE(digests[0], 0u);
  EXPECT_EQ(digests[0], digests[1]);
}

}  // namespace
}  // namespace zs
