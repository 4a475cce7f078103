// The engine's model-parallel hooks (EngineParallelism), ranks as threads:
// - [Note: one norm over the grid]: on a tp x pp x dp grid the global gradient norm counts the
//   tp-sharded parameters of every tp rank, the tp-replicated ones once, and every pp stage; all
//   ranks and all ZeRO stages get the same bits, and the value matches a float64 reference.
// - [Note: micro-batches in flight]: a pipeline's 1F1B bracket order (forwards of later
//   micro-batches before backwards of earlier ones) with each micro-batch named trains to the
//   same bits as the usual order, with the same gradient staging peak.
// - [Note: per-step reduction]: the same order reduced once per step trains to the same
//   parameters as the usual order: bit for bit at one dp rank, and bit-identical across ZeRO
//   stages 0-3 at two; it holds more staging.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include "runtime/comm/all_gather_scalar.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/comm/process_groups.h"
#include "runtime/device/device_factory.h"
#include "runtime/engine/zero_engine.h"
#include "runtime/topology/rank_grid.h"

namespace zs {
namespace {

// unit 0 {w: tp-sharded, b: replicated}, unit 1 {g: replicated, v: tp-sharded}.
ModelSpec ToySpec() {
  ModelSpec spec;
  spec.units.push_back(UnitSpec{"u0", {ParamSpec{"w", {37}}, ParamSpec{"b", {5}}}});
  spec.units.push_back(UnitSpec{"u1", {ParamSpec{"g", {11}}, ParamSpec{"v", {23}}}});
  spec.units[0].params[0].tensor_parallel = true;
  spec.units[1].params[1].tensor_parallel = true;
  return spec;
}

ParamInit ToyInit() {
  return [](int unit, int param, std::span<float> values) {
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = 0.01f * float((unit * 7 + param * 3 + int(i)) % 13) - 0.05f;
    }
  };
}

// The raw gradient of one element: a multiple of 1/64 (exact in float), depending on the tp rank
// only for tp-sharded parameters (replicated ones are equal on every tp rank, as in a real
// tensor-parallel model), and on the pp stage, the step and the micro-batch.
float RawGrad(const ParamSpec& p, int unit, int param, int64_t i, int tp, int pp, int step,
              int micro) {
  const int t = p.tensor_parallel ? tp : 0;
  const int k = (unit * 31 + param * 17 + int(i) * 5 + t * 11 + pp * 13 + step * 3 + micro * 7) % 23;
  return float(k - 11) / 64.0f;
}

Status WriteGrads(ZeroEngine& engine, int unit, int tp, int pp, int step, int micro) {
  const UnitSpec& u = engine.model().units[size_t(unit)];
  const float scale = engine.backward_scale();
  for (int p = 0; p < int(u.params.size()); ++p) {
    std::span<float> g = engine.Grad(unit, p);
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] += RawGrad(u.params[size_t(p)], unit, p, int64_t(i), tp, pp, step, micro) * scale;
    }
  }
  return OkStatus();
}

// One micro-batch, forward then backward, through both units.
Status PlainMicroBatch(ZeroEngine& e, int tp, int pp, int step, int micro) {
  for (int u : {0, 1}) {
    ZS_RETURN_IF_ERROR(e.BeginForward(u));
    ZS_RETURN_IF_ERROR(e.EndForward(u));
  }
  for (int u : {1, 0}) {
    ZS_RETURN_IF_ERROR(e.BeginBackward(u));
    ZS_RETURN_IF_ERROR(WriteGrads(e, u, tp, pp, step, micro));
    ZS_RETURN_IF_ERROR(e.EndBackward(u));
  }
  return OkStatus();
}

// float64 reference of the global norm at step `step` (ga micro-batches, dp ranks that all write
// the same raw gradients, so the reduced gradient is the raw one's mean over micro-batches).
double ReferenceNorm(int tp_size, int pp_size, int step, int ga) {
  const ModelSpec spec = ToySpec();
  double sum = 0;
  for (int pp = 0; pp < pp_size; ++pp) {
    for (int tp = 0; tp < tp_size; ++tp) {
      for (int u = 0; u < 2; ++u) {
        for (int p = 0; p < 2; ++p) {
          const ParamSpec& ps = spec.units[size_t(u)].params[size_t(p)];
          if (!ps.tensor_parallel && tp != 0) continue;  // counted once
          for (int64_t i = 0; i < ps.numel(); ++i) {
            double g = 0;
            for (int m = 0; m < ga; ++m) g += RawGrad(ps, u, p, i, tp, pp, step, m);
            g /= ga;  // backward_scale() makes it the mean over micro-batches
            sum += g * g;
          }
        }
      }
    }
  }
  return std::sqrt(sum);
}

struct GridRun {
  std::vector<double> norms;  // [step * world + rank]
};

GridRun RunGrid(int tp, int pp, int dp, int stage) {
  const int world = tp * pp * dp;
  const RankGrid grid = RankGrid::Create(tp, pp, dp).value();
  EngineConfig config;
  config.zero_optimization.stage = stage;
  config.optimizer.lr = 1e-2;
  config.gradient_accumulation_steps = 2;
  const int steps = 2;
  GridRun run;
  run.norms.assign(size_t(steps * world), -1.0);
  std::mutex mu;
  CommOptions options;
  options.timeout = std::chrono::milliseconds(30'000);
  Status status = RunLocalRanks(
      world, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(comm, grid));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        EngineParallelism parallel;
        parallel.model_parallel = &groups.model_parallel();
        parallel.tp_rank = groups.coord().tp;
        ZS_ASSIGN_OR_RETURN(auto engine, ZeroEngine::Create(config, ToySpec(), ToyInit(), *device,
                                                            groups.dp(), nullptr, parallel));
        for (int step = 0; step < steps; ++step) {
          for (int m = 0; m < config.gradient_accumulation_steps; ++m) {
            ZS_RETURN_IF_ERROR(PlainMicroBatch(*engine, groups.coord().tp, groups.coord().pp,
                                               step, m));
          }
          ZS_ASSIGN_OR_RETURN(StepResult r, engine->Step());
          std::lock_guard<std::mutex> lock(mu);
          run.norms[size_t(step * world + rank)] = r.grad_norm;
        }
        return OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status.ToString();
  return run;
}

TEST(EngineParallelismTest, NormCoversTheGridOnceAndAgreesEverywhere) {
  struct Grid {
    int tp, pp, dp;
  };
  for (Grid g : {Grid{2, 1, 2}, Grid{2, 2, 2}, Grid{1, 2, 2}, Grid{4, 1, 1}}) {
    std::vector<double> stage0_norms;
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(fmt::format("tp={} pp={} dp={} stage={}", g.tp, g.pp, g.dp, stage));
      GridRun run = RunGrid(g.tp, g.pp, g.dp, stage);
      const int world = g.tp * g.pp * g.dp;
      for (int step = 0; step < 2; ++step) {
        const double want = ReferenceNorm(g.tp, g.pp, step, 2);
        const double first = run.norms[size_t(step * world)];
        EXPECT_NEAR(first, want, 1e-12 * want) << "step " << step;
        for (int r = 1; r < world; ++r) {  // every rank, bit for bit
          const double x = run.norms[size_t(step * world + r)];
          EXPECT_EQ(std::memcmp(&x, &first, sizeof x), 0) << "rank " << r << " step " << step;
        }
      }
      if (stage == 0) {
        stage0_norms = run.norms;
      } else {
        EXPECT_EQ(std::memcmp(run.norms.data(), stage0_norms.data(),
                              run.norms.size() * sizeof(double)),
                  0)
            << "stage " << stage << " differs from stage 0";
      }
    }
  }
}

// Replicated parameters would be counted tp times without the spec's flag: the norm must change
// when the flag is wrong, so the test above cannot pass by accident.
TEST(EngineParallelismTest, ReplicatedParametersAreNotCountedTwice) {
  const double once = ReferenceNorm(2, 1, 0, 2);
  GridRun run = RunGrid(2, 1, 1, 1);
  EXPECT_NEAR(run.norms[0], once, 1e-12 * once);
  // Counting the replicated parameters on both tp ranks would give a strictly larger norm.
  double twice_sq = once * once;
  const ModelSpec spec = ToySpec();
  for (int u = 0; u < 2; ++u) {
    for (int p = 0; p < 2; ++p) {
      const ParamSpec& ps = spec.units[size_t(u)].params[size_t(p)];
      if (ps.tensor_parallel) continue;
      for (int64_t i = 0; i < ps.numel(); ++i) {
        const double g =
            (RawGrad(ps, u, p, i, 0, 0, 0, 0) + RawGrad(ps, u, p, i, 0, 0, 0, 1)) / 2;
        twice_sq += g * g;
      }
    }
  }
  EXPECT_GT(std::sqrt(twice_sq), once * (1 + 1e-6));
}

// ---- per-step reduction ----------------------------------------------------------------------

enum class Order { kPlain, kOneFOneB };

// Trains `steps` steps of ga micro-batches on dp ranks; returns every parameter's gathered fp32
// master values (rank 0) and the digest.
struct TrainResult {
  std::vector<std::vector<float>> params;
  uint64_t digest = 0;
  int64_t comm_buffers_peak = 0;  // rank 0's peak of kCommBuffers (gradient staging, buckets)
};

// `per_step`: EngineParallelism::reduce_per_step; otherwise the 1F1B order names each bracket's
// micro-batch (SetMicroBatch), as a pipeline stage does.
TrainResult TrainToy(int dp, int stage, Order order, bool per_step) {
  EngineConfig config;
  config.zero_optimization.stage = stage;
  config.optimizer.lr = 1e-2;
  config.optimizer.weight_decay = 0.1;
  config.gradient_accumulation_steps = 3;
  TrainResult result;
  std::mutex mu;
  CommOptions options;
  options.timeout = std::chrono::milliseconds(30'000);
  Status status = RunLocalRanks(
      dp, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        EngineParallelism parallel;
        parallel.reduce_per_step = per_step;
        ZS_ASSIGN_OR_RETURN(auto engine, ZeroEngine::Create(config, ToySpec(), ToyInit(), *device,
                                                            comm, nullptr, parallel));
        ZeroEngine& e = *engine;
        const bool tagged = order == Order::kOneFOneB && !per_step;
        auto forward = [&](int m) -> Status {
          if (tagged) e.SetMicroBatch(m);
          for (int u : {0, 1}) {
            ZS_RETURN_IF_ERROR(e.BeginForward(u));
            ZS_RETURN_IF_ERROR(e.EndForward(u));
          }
          return OkStatus();
        };
        for (int step = 0; step < 3; ++step) {
          // Each rank's gradients differ by rank (a dp rank sees other data).
          auto backward = [&](int m) -> Status {
            if (tagged) e.SetMicroBatch(m);
            for (int u : {1, 0}) {
              ZS_RETURN_IF_ERROR(e.BeginBackward(u));
              ZS_RETURN_IF_ERROR(WriteGrads(e, u, /*tp=*/0, /*pp=*/rank, step, m));
              ZS_RETURN_IF_ERROR(e.EndBackward(u));
            }
            return OkStatus();
          };
          if (order == Order::kPlain) {
            for (int m = 0; m < 3; ++m) {
              ZS_RETURN_IF_ERROR(forward(m));
              ZS_RETURN_IF_ERROR(backward(m));
            }
          } else {  // F0 F1 B0 F2 B1 B2: a first pipeline stage's 1F1B with two in flight
            ZS_RETURN_IF_ERROR(forward(0));
            ZS_RETURN_IF_ERROR(forward(1));
            ZS_RETURN_IF_ERROR(backward(0));
            ZS_RETURN_IF_ERROR(forward(2));
            ZS_RETURN_IF_ERROR(backward(1));
            ZS_RETURN_IF_ERROR(backward(2));
          }
          ZS_RETURN_IF_ERROR(e.Step().status());
        }
        ZS_ASSIGN_OR_RETURN(uint64_t digest, e.MasterDigest());
        std::vector<std::vector<float>> params;
        for (int u = 0; u < 2; ++u) {
          for (int p = 0; p < 2; ++p) {
            ZS_ASSIGN_OR_RETURN(auto values, e.GatherMasterParam(u, p));
            params.push_back(std::move(values));
          }
        }
        if (rank == 0) {
          std::lock_guard<std::mutex> lock(mu);
          result.params = std::move(params);
          result.digest = digest;
          result.comm_buffers_peak = tracker.Peak(MemoryTier::kDevice, MemoryCategory::kCommBuffers);
        }
        return OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status.ToString();
  return result;
}

TEST(EngineParallelismTest, PerStepReductionMatchesThePlainOrder) {
  // One dp rank: the fp32 staging sums the micro-batches in the order the per-micro-batch path
  // accumulates them, so the bits agree.
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(fmt::format("dp=1 stage={}", stage));
    TrainResult plain = TrainToy(1, stage, Order::kPlain, false);
    TrainResult piped = TrainToy(1, stage, Order::kOneFOneB, true);
    EXPECT_EQ(plain.digest, piped.digest);
  }
  // Two dp ranks: reducing the sum differs from summing the reductions in the last bits only;
  // the stages agree with each other bit for bit.
  TrainResult plain = TrainToy(2, 0, Order::kPlain, false);
  uint64_t stage0 = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(fmt::format("dp=2 stage={}", stage));
    TrainResult piped = TrainToy(2, stage, Order::kOneFOneB, true);
    if (stage == 0) stage0 = piped.digest;
    EXPECT_EQ(piped.digest, stage0);
    ASSERT_EQ(piped.params.size(), plain.params.size());
    for (size_t p = 0; p < plain.params.size(); ++p) {
      for (size_t i = 0; i < plain.params[p].size(); ++i) {
        EXPECT_NEAR(piped.params[p][i], plain.params[p][i], 1e-6) << "param " << p << " [" << i << "]";
      }
    }
  }
}

// [Note: micro-batches in flight] The 1F1B order with each bracket's micro-batch named reduces
// every unit's gradient of micro-batch m at m's last backward on it: the same reductions in the
// same order as the plain loop, so the same bits at every dp size and stage; and a unit holds
// its fp32 staging only during its micro-batch's backward, where per-step reduction holds every
// unit's until Step.
TEST(EngineParallelismTest, NamedMicroBatchesReduceAsThePlainOrder) {
  for (int dp : {1, 2}) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(fmt::format("dp={} stage={}", dp, stage));
      TrainResult plain = TrainToy(dp, stage, Order::kPlain, false);
      TrainResult named = TrainToy(dp, stage, Order::kOneFOneB, false);
      EXPECT_EQ(named.digest, plain.digest);
      EXPECT_EQ(named.comm_buffers_peak, plain.comm_buffers_peak);
      TrainResult per_step = TrainToy(dp, stage, Order::kOneFOneB, true);
      // Both units' staging at once: unit 0's padded size more than the plain loop's peak,
      // which holds unit 0's and unit 1's one at a time (unit 0 is the larger).
      EXPECT_GT(per_step.comm_buffers_peak, named.comm_buffers_peak);
    }
  }
}

// Without the names, the 1F1B order is a misuse the engine catches: micro-batch 1's forward
// would open while micro-batch 0's backward of the same unit is still to come, and the
// gradient of two micro-batches would mix.
TEST(EngineParallelismDeathTest, InterleavedMicroBatchesNeedNames) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        CommOptions options;
        (void)RunLocalRanks(1, options, [&](int, Communicator& comm, MemoryTracker& tracker) {
          auto device = CreateDevice("cpu", tracker).value();
          EngineConfig config;
          config.gradient_accumulation_steps = 2;
          auto e = ZeroEngine::Create(config, ToySpec(), ToyInit(), *device, comm).value();
          for (int m = 0; m < 2; ++m) {  // F0 F1
            for (int u : {0, 1}) (void)e->BeginForward(u), (void)e->EndForward(u);
          }
          for (int u : {1, 0}) (void)e->BeginBackward(u), (void)e->EndBackward(u);  // B0
          (void)e->BeginForward(0);  // F2: unit 0's backward is under way (one of two done)
          return OkStatus();
        });
      },
      "while its backward is under way");
}

TEST(EngineParallelismTest, PerStepReductionNeedsEveryBackwardBeforeStep) {
  CommOptions options;
  Status status = RunLocalRanks(
      1, options, [&](int, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        EngineParallelism parallel;
        parallel.reduce_per_step = true;
        EngineConfig config;
        ZS_ASSIGN_OR_RETURN(auto e, ZeroEngine::Create(config, ToySpec(), ToyInit(), *device, comm,
                                                       nullptr, parallel));
        for (int u : {0, 1}) {
          ZS_RETURN_IF_ERROR(e->BeginForward(u));
          ZS_RETURN_IF_ERROR(e->EndForward(u));
        }
        ZS_RETURN_IF_ERROR(e->BeginBackward(1));
        ZS_RETURN_IF_ERROR(e->EndBackward(1));
        StatusOr<StepResult> r = e->Step();  // unit u0 has a forward without its backward
        EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
        EXPECT_NE(r.status().message().find("'u0'"), std::string::npos) << r.status().ToString();
        return OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status.ToString();
}

// fp16: an overflow on one pipeline stage (an inf in its gradient) skips the step on every
// rank of the grid, and every rank's loss scale moves alike; the next step is taken everywhere.
TEST(EngineParallelismTest, Fp16OverflowOnOneStageSkipsEveryStage) {
  const RankGrid grid = RankGrid::Create(1, 2, 2).value();  // pp 2 x dp 2
  EngineConfig config;
  config.zero_optimization.stage = 2;
  config.fp16.enabled = true;
  config.fp16.hysteresis = 1;
  std::mutex mu;
  std::vector<StepResult> first(4), second(4);
  CommOptions options;
  options.timeout = std::chrono::milliseconds(30'000);
  Status status = RunLocalRanks(
      4, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(comm, grid));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        EngineParallelism parallel;
        parallel.model_parallel = &groups.model_parallel();
        ZS_ASSIGN_OR_RETURN(auto e, ZeroEngine::Create(config, ToySpec(), ToyInit(), *device,
                                                       groups.dp(), nullptr, parallel));
        for (int step = 0; step < 2; ++step) {
          for (int u : {0, 1}) {
            ZS_RETURN_IF_ERROR(e->BeginForward(u));
            ZS_RETURN_IF_ERROR(e->EndForward(u));
          }
          for (int u : {1, 0}) {
            ZS_RETURN_IF_ERROR(e->BeginBackward(u));
            ZS_RETURN_IF_ERROR(WriteGrads(*e, u, 0, groups.coord().pp, step, 0));
            // Step 0: one rank of the last stage overflows.
            if (step == 0 && groups.coord().pp == 1 && groups.coord().dp == 1 && u == 1) {
              e->Grad(1, 0)[3] = std::numeric_limits<float>::infinity();
            }
            ZS_RETURN_IF_ERROR(e->EndBackward(u));
          }
          ZS_ASSIGN_OR_RETURN(StepResult r, e->Step());
          std::lock_guard<std::mutex> lock(mu);
          (step == 0 ? first : second)[size_t(rank)] = r;
        }
        return OkStatus();
      });
  ASSERT_TRUE(status.ok()) << status.ToString();
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(fmt::format("rank {}", r));
    EXPECT_TRUE(first[size_t(r)].skipped);
    EXPECT_EQ(first[size_t(r)].step, 0);
    EXPECT_FALSE(second[size_t(r)].skipped);
    EXPECT_EQ(second[size_t(r)].step, 1);
    EXPECT_EQ(second[size_t(r)].loss_scale, first[0].loss_scale / 2) << "the scale halves";
  }
}

// Two engines per rank that clip with one norm (experts: PrepareStep/FinishStep): an fp16
// overflow in one rank's second engine skips the step of both engines on every rank, and the
// norm both report is the total of both.
TEST(EngineParallelismTest, TwoEnginesShareOneNormAndOneOverflowDecision) {
  EngineConfig config;
  config.zero_optimization.stage = 1;
  config.fp16.enabled = true;
  config.fp16.hysteresis = 1;
  std::mutex mu;
  std::vector<std::array<StepResult, 2>> first(2), second(2);
  std::vector<double> expected_sum(2, 0.0);
  CommOptions options;
  options.timeout = std::chrono::milliseconds(30'000);
  Status status = RunLocalRanks(
      2, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        // The second engine's group: this rank alone (as an edp group of 1).
        ZS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> alone, comm.Split(rank, 0, "alone"));
        EngineParallelism second_parallel;
        second_parallel.ep_rank = rank;
        ZS_ASSIGN_OR_RETURN(auto a, ZeroEngine::Create(config, ToySpec(), ToyInit(), *device,
                                                       comm));
        ModelSpec experts = ToySpec();  // each rank's second engine holds its own "experts"
        for (UnitSpec& unit : experts.units) {
          for (ParamSpec& p : unit.params) p.expert_parallel = true;
        }
        ZS_ASSIGN_OR_RETURN(auto b, ZeroEngine::Create(config, std::move(experts), ToyInit(),
                                                       *device, *alone, nullptr, second_parallel));
        for (int step = 0; step < 2; ++step) {
          for (ZeroEngine* e : {a.get(), b.get()}) {
            for (int u : {0, 1}) {
              ZS_RETURN_IF_ERROR(e->BeginForward(u));
              ZS_RETURN_IF_ERROR(e->EndForward(u));
            }
            for (int u : {1, 0}) {
              ZS_RETURN_IF_ERROR(e->BeginBackward(u));
              ZS_RETURN_IF_ERROR(WriteGrads(*e, u, 0, e == b.get() ? 5 + rank : 0, step, 0));
              if (step == 0 && rank == 1 && e == b.get() && u == 1) {
                e->Grad(1, 1)[2] = std::numeric_limits<float>::infinity();
              }
              ZS_RETURN_IF_ERROR(e->EndBackward(u));
            }
          }
          ZS_ASSIGN_OR_RETURN(const double sa, a->PrepareStep());
          ZS_ASSIGN_OR_RETURN(const double sb, b->PrepareStep());
          // The second engines' sums over the ranks, then the whole.
          ZS_ASSIGN_OR_RETURN(const double sb_all, AllSumScalar(comm, sb));
          const double total = sa + sb_all;
          ZS_ASSIGN_OR_RETURN(StepResult ra, a->FinishStep(total));
          ZS_ASSIGN_OR_RETURN(StepResult rb, b->FinishStep(total));
          std::lock_guard<std::mutex> lock(mu);
          (step == 0 ? first : second)[size_t(rank)] = {ra, rb};
          if (step == 1) expected_sum[size_t(rank)] = total;
        }
        return OkStatus();
      });
  ASSERT_TRUE(status.ok()) << status.ToString();
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(fmt::format("rank {}", r));
    for (int e = 0; e < 2; ++e) {
      EXPECT_TRUE(first[size_t(r)][size_t(e)].skipped) << "engine " << e;
      EXPECT_FALSE(second[size_t(r)][size_t(e)].skipped) << "engine " << e;
      EXPECT_EQ(second[size_t(r)][size_t(e)].step, 1);
      const double norm = second[size_t(r)][size_t(e)].grad_norm;
      // The loss scale was halved after the overflow; the norm is of unscaled gradients.
      EXPECT_EQ(norm, std::sqrt(expected_sum[size_t(r)])) << "engine " << e;
      EXPECT_EQ(norm, second[0][0].grad_norm) << "every rank and engine: one norm";
    }
  }
}

TEST(EngineParallelismTest, TpRankOutsideTheGroupIsAnError) {
  CommOptions options;
  Status status = RunLocalRanks(
      1, options, [&](int, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        EngineParallelism parallel;
        parallel.model_parallel = &comm;
        parallel.tp_rank = 3;
        auto e = ZeroEngine::Create(EngineConfig{}, ToySpec(), ToyInit(), *device, comm, nullptr,
                                    parallel);
        EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
        EXPECT_NE(e.status().message().find("tp_rank 3"), std::string::npos);
        return OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status.ToString();
}

}  // namespace
}  // namespace zs
