// GridGpt against one rank: a tensor-, pipeline- and data-parallel GPT (ranks as threads over
// the local backend) trains like nn::Gpt on one rank with the same global batch and seed.
// - Every step's loss within 1e-5 relative of the one-rank run's.
// - The final fp32 master parameters, sliced as each rank holds them, within kParamTolerance
//   (grid_parity.h, [Note: parameter tolerance]) of the one-rank run's.
// - Within one grid, ZeRO stages 0-3 give bit-identical parameters (each rank's digest), and
//   activation recompute gives the same bits as keeping the activations.
// - Bad grids are errors naming the sizes.
#include "runtime/parallel/gpt/grid_gpt.h"

#include <gtest/gtest.h>

#include <mutex>

#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/nn/gpt.h"
#include "tests/runtime/parallel/gpt/grid_parity.h"

namespace zs::parallel {
namespace {

// The model, data, reference run and comparison are shared with the multi-process parity
// worker (grid_parity.h; the tolerances in [Note: parameter tolerance] there).
using parity::Config;
using parity::Fill;
using parity::GridSpec;
using parity::kSeq;
using parity::ParamDiff;
using parity::Reference;
using parity::SmallGpt;

struct GridResult {
  Status status;
  std::vector<double> losses;               // rank 0's (the same on every rank)
  std::vector<double> grad_norms;           // rank 0's global gradient norm per step
  std::vector<double> eval_losses;          // rank 0's held-out losses (spec.evaluate)
  std::vector<uint64_t> digests;            // per world rank
  ParamDiff diff;                           // every rank's parameters against the reference, merged
  std::vector<int64_t> activation_peaks;    // per world rank
  std::vector<int64_t> micro_batch_peaks;   // per world rank: what micro-batches in flight hold
  std::vector<int64_t> comm_buffers_peaks;  // per world rank: gradient staging and buckets
};

// The grid's ranks as threads (local backend), each compared with `ref` when given.
GridResult RunGrid(const GridSpec& spec, const Reference* ref) {
  GridResult out;
  const int world = spec.world();
  out.digests.assign(size_t(world), 0);
  out.activation_peaks.assign(size_t(world), 0);
  out.micro_batch_peaks.assign(size_t(world), 0);
  out.comm_buffers_peaks.assign(size_t(world), 0);
  std::mutex mu;
  CommOptions options;
  options.timeout = std::chrono::milliseconds(60'000);
  out.status = RunLocalRanks(
      world, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(spec.tp, spec.pp, spec.dp, world));
        ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(comm, grid));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        ZS_ASSIGN_OR_RETURN(parity::RankResult r,
                            parity::RunGridRank(spec, groups, *device, tracker, ref));
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0) {
          out.losses = r.losses;
          out.grad_norms = r.grad_norms;
          out.eval_losses = r.eval_losses;
        }
        out.digests[size_t(rank)] = r.digest;
        out.activation_peaks[size_t(rank)] = r.activation_peak;
        out.micro_batch_peaks[size_t(rank)] = r.micro_batch_peak;
        out.comm_buffers_peaks[size_t(rank)] = r.comm_buffers_peak;
        out.diff.Merge(r.diff);
        return OkStatus();
      });
  return out;
}

// The grid's run against the one-rank run: every check of parity::ParityFailures (each step's
// loss and gradient norm, the parameter differences measured by RunGrid).
void ExpectCloseToOneRank(const GridSpec& spec, const GridResult& grid, const Reference& ref) {
  for (const std::string& failure :
       parity::ParityFailures(grid.losses, grid.grad_norms, grid.diff, ref, grid.eval_losses)) {
    ADD_FAILURE() << failure;
  }
  if (grid.losses.empty() || ref.losses.empty()) return;
  std::printf(
      "  %s: losses %.6f -> %.6f (one rank %.6f -> %.6f), parameters: max |diff| %.3g, "
      "mean %.3g\n",
      spec.ToString().c_str(), grid.losses.front(), grid.losses.back(), ref.losses.front(),
      ref.losses.back(), grid.diff.max, grid.diff.mean());
}

void ExpectMatchesReference(const GridSpec& spec) {
  SCOPED_TRACE(spec.ToString());
  const StatusOr<Reference> ref = parity::RunReference(spec);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const GridResult grid = RunGrid(spec, &*ref);
  ASSERT_TRUE(grid.status.ok()) << grid.status.ToString();
  ExpectCloseToOneRank(spec, grid, *ref);
}

TEST(GridGptTest, TensorParallelMatchesOneRank) {
  GridSpec s;
  s.tp = 2;
  ExpectMatchesReference(s);
  s.sequence_parallel = true;
  ExpectMatchesReference(s);
}

TEST(GridGptTest, PipelineScheduleMatchesOneRank) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB}) {
    GridSpec s;
    s.pp = 2;
    s.schedule = kind;
    ExpectMatchesReference(s);
  }
  GridSpec s;
  s.pp = 2;
  s.layers = 4;
  s.schedule = ScheduleKind::kInterleaved;
  s.virtual_stages = 2;
  ExpectMatchesReference(s);
  s.pp = 1;  // one rank, two chunks: the head reads wte from this rank's own engine
  ExpectMatchesReference(s);
}

TEST(GridGptTest, ThreeDimensionalGridMatchesOneRank) {
  GridSpec s;
  s.tp = 2;
  s.pp = 2;
  s.dp = 2;
  s.ga = 2;
  ExpectMatchesReference(s);
}

TEST(GridGptTest, ZeroStagesAreBitIdenticalWithinAGrid) {
  GridSpec s;
  s.tp = 2;
  s.pp = 2;
  s.dp = 2;
  s.ga = 2;
  std::vector<uint64_t> first;
  for (int stage = 0; stage <= 3; ++stage) {
    s.stage = stage;
    SCOPED_TRACE(s.ToString());
    GridResult r = RunGrid(s, nullptr);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    if (stage == 0) {
      first = r.digests;
    } else {
      EXPECT_EQ(r.digests, first);
    }
  }
}

// [Note: micro-batches in flight] (zero_engine_impl.h): under 1F1B each stage reduces a unit's
// gradient at the micro-batch's last backward on it, so a unit's fp32 staging lives only during
// that backward; per-step reduction keeps every unit's until Step. Both modes give bit-identical
// parameters at every ZeRO stage within a grid, and both match the one-rank run.
TEST(GridGptTest, PipelineStagesReducePerMicroBatch) {
  GridSpec s;
  s.pp = 2;
  s.dp = 2;
  s.layers = 4;
  s.ga = 4;
  for (bool per_step : {false, true}) {
    s.reduce_per_step = per_step;
    std::vector<uint64_t> first;
    for (int stage = 0; stage <= 3; ++stage) {
      s.stage = stage;
      SCOPED_TRACE(fmt::format("{}, reduce_per_step {}", s.ToString(), per_step));
      GridResult r = RunGrid(s, nullptr);
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      if (stage == 0) first = r.digests;
      EXPECT_EQ(r.digests, first);
    }
  }
  s.stage = 2;
  s.reduce_per_step = false;
  ExpectMatchesReference(s);
  const GridResult per_micro_batch = RunGrid(s, nullptr);
  s.reduce_per_step = true;
  ExpectMatchesReference(s);
  const GridResult per_step = RunGrid(s, nullptr);
  ASSERT_TRUE(per_micro_batch.status.ok() && per_step.status.ok());
  // Each stage holds two blocks (and the embedding, or the head's LayerNorm); per-step
  // reduction holds every unit's fp32 staging at once, per micro-batch one unit's at a time
  // (beside the reducer's buckets, the same in both): at least one block's staging less.
  const auto gpt = nn::Gpt::Create(SmallGpt(s.layers));
  ASSERT_TRUE(gpt.ok()) << gpt.status().ToString();
  const int64_t block_bytes = (*gpt)->spec().units[1].numel() * int64_t(sizeof(float));
  for (int r = 0; r < s.world(); ++r) {
    std::printf("  rank %d: comm buffers peak %lld B per micro-batch, %lld B per step\n", r,
                (long long)per_micro_batch.comm_buffers_peaks[size_t(r)],
                (long long)per_step.comm_buffers_peaks[size_t(r)]);
    EXPECT_LE(per_micro_batch.comm_buffers_peaks[size_t(r)] + block_bytes,
              per_step.comm_buffers_peaks[size_t(r)])
        << "rank " << r;
  }
}

TEST(GridGptTest, RecomputeGivesTheSameBitsWithLessActivationMemory) {
  GridSpec s;
  s.pp = 2;
  s.layers = 4;
  GridResult kept = RunGrid(s, nullptr);
  s.recompute = true;
  GridResult recomputed = RunGrid(s, nullptr);
  ASSERT_TRUE(kept.status.ok()) << kept.status.ToString();
  ASSERT_TRUE(recomputed.status.ok()) << recomputed.status.ToString();
  EXPECT_EQ(kept.digests, recomputed.digests);
  for (size_t r = 0; r < kept.activation_peaks.size(); ++r) {
    EXPECT_LT(recomputed.activation_peaks[r], kept.activation_peaks[r]) << "rank " << r;
  }
}

// GridGpt::Evaluate: a forward-only pass over the pipeline (the engines in an evaluation, no
// activations kept) before every step and after the last one gives the one-rank run's held-out
// loss (nn::Gpt::Forward between its steps), and the steps around it keep their bits: the
// digests equal those of the same run without evaluations.
TEST(GridGptTest, EvaluationMatchesOneRankAndLeavesTheStepsUnchanged) {
  std::vector<GridSpec> specs(3);
  specs[0].tp = specs[0].pp = specs[0].dp = 2;  // TP2 x PP2 x DP2, 1F1B, ZeRO-3
  specs[0].ga = 2;
  specs[0].stage = 3;
  specs[1].pp = 2;  // interleaved over 2 x 2 chunks, 3 eval micro-batches: a partial group
  specs[1].layers = 3;
  specs[1].ga = 2;
  specs[1].schedule = ScheduleKind::kInterleaved;
  specs[1].virtual_stages = 2;
  specs[1].recompute = true;
  specs[1].eval_micro_batches = 3;
  specs[2].experts = 4;  // experts over ep 2 with a pipeline
  specs[2].pp = 2;
  specs[2].dp = 2;
  specs[2].ep = 2;
  specs[2].ga = 2;
  specs[2].stage = 2;
  for (GridSpec s : specs) {
    s.evaluate = true;
    SCOPED_TRACE(s.ToString());
    const StatusOr<Reference> ref = parity::RunReference(s);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    ASSERT_EQ(ref->eval_losses.size(), size_t(parity::kSteps + 1));
    const GridResult evaluated = RunGrid(s, &*ref);
    ASSERT_TRUE(evaluated.status.ok()) << evaluated.status.ToString();
    ExpectCloseToOneRank(s, evaluated, *ref);
    // Training moves the held-out loss (or the comparison above shows little).
    EXPECT_NE(evaluated.eval_losses.front(), evaluated.eval_losses.back());
    s.evaluate = false;
    const GridResult plain = RunGrid(s, nullptr);
    ASSERT_TRUE(plain.status.ok()) << plain.status.ToString();
    EXPECT_EQ(evaluated.digests, plain.digests);
  }
}

TEST(GridGptTest, EvaluationNeedsAMicroBatch) {
  GridSpec s;
  s.pp = 2;
  const Status status = RunLocalRanks(
      2, CommOptions{}, [&](int, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(1, 2, 1, 2));
        ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(comm, grid));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        ZS_ASSIGN_OR_RETURN(auto g, GridGpt::Create(parity::Options(s), groups, *device, &tracker));
        auto none = [](int, std::span<int32_t>, std::span<int32_t>) { return OkStatus(); };
        const StatusOr<double> loss = g->Evaluate(none, 0);
        if (loss.ok() || loss.status().code() != StatusCode::kInvalidArgument) {
          return InternalError("Evaluate(0 micro-batches) was not InvalidArgument");
        }
        // Nothing ran, so nothing broke: a step still runs.
        return g
            ->TrainStep([&](int mb, std::span<int32_t> tokens, std::span<int32_t> targets) {
              Fill(0, mb, 0, 1, s.micro_batch, tokens, targets);
              return OkStatus();
            })
            .status();
      });
  EXPECT_TRUE(status.ok()) << status.ToString();
}

// Experts: the same grid code at one rank (every expert local) is the reference
// (parity::RunReference); MoeMlp itself is checked against a float64 loop and finite
// differences in expert_test. The capacity is large, so no token is dropped at any ep size.
TEST(GridGptTest, ExpertParallelMatchesOneRank) {
  GridSpec s;
  s.experts = 4;
  s.dp = 2;
  s.ep = 2;  // each rank holds 2 experts; edp groups of 1
  s.ga = 2;
  ExpectMatchesReference(s);
  s.dp = 4;  // ep groups {0,1}, {2,3}; the experts' states sharded over edp groups of 2
  s.ga = 1;
  s.stage = 3;
  ExpectMatchesReference(s);
  s.dp = 2;  // with a pipeline
  s.pp = 2;
  s.ga = 2;
  s.stage = 1;
  ExpectMatchesReference(s);
}

// [Note: experts over tp] (moe_block_mlp.h): the experts replicated over tp, every tp
// rank running them on all rows, with and without sequence parallelism, at ZeRO-2 and 3.
TEST(GridGptTest, ExpertsWithTensorParallelismMatchOneRank) {
  GridSpec s;
  s.experts = 4;
  s.tp = 2;
  s.dp = 2;
  s.ep = 2;
  s.ga = 2;
  s.stage = 2;
  ExpectMatchesReference(s);
  s.sequence_parallel = true;
  s.stage = 3;
  ExpectMatchesReference(s);
  s.pp = 2;  // TP2 x PP2 x DP2 with experts over ep 2
  s.stage = 1;
  ExpectMatchesReference(s);
}

// 1F1B keeps at most p - r micro-batches in flight on pp rank r, GPipe all m: the activations
// held (each micro-batch's are the same size) scale exactly so.
TEST(GridGptTest, OneFOneBHoldsAtMostPMinusRMicroBatches) {
  GridSpec s;
  s.pp = 2;
  s.layers = 4;
  s.ga = 8;
  s.schedule = ScheduleKind::kGPipe;
  GridResult gpipe = RunGrid(s, nullptr);
  s.schedule = ScheduleKind::kOneFOneB;
  GridResult one = RunGrid(s, nullptr);
  ASSERT_TRUE(gpipe.status.ok()) << gpipe.status.ToString();
  ASSERT_TRUE(one.status.ok()) << one.status.ToString();
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(fmt::format("pp rank {}", r));
    ASSERT_GT(gpipe.micro_batch_peaks[size_t(r)], 0);
    EXPECT_EQ(one.micro_batch_peaks[size_t(r)] * s.ga,
              gpipe.micro_batch_peaks[size_t(r)] * (2 - r));
  }
}

// A rank that fails mid-step (its data source errs on step 1) makes every other rank of the
// grid fail too, soon, instead of hanging; the failed rank's GridGpt refuses further steps.
TEST(GridGptTest, ARankFailingMidStepFailsEveryRankWithoutHanging) {
  const int world = 8;
  std::vector<Status> statuses(world);
  std::mutex mu;
  CommOptions options;
  options.timeout = std::chrono::milliseconds(20'000);
  const auto start = std::chrono::steady_clock::now();
  (void)RunLocalRanks(
      world, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        Status result = [&]() -> Status {
          ZS_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(2, 2, 2, world));
          ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(comm, grid));
          ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
          GridGptOptions o;
          o.model.gpt = SmallGpt(2);
          o.engine = Config(1, 2);
          o.micro_batch = 2;
          o.seq = kSeq;
          ZS_ASSIGN_OR_RETURN(auto g, GridGpt::Create(o, groups, *device, &tracker));
          for (int step = 0; step < 3; ++step) {
            StatusOr<GridStepResult> r =
                g->TrainStep([&](int mb, std::span<int32_t> tokens, std::span<int32_t> targets) {
                  if (rank == 1 && step == 1 && mb == 1) {
                    return IoError("injected: rank 1 lost its data");
                  }
                  Fill(step, mb, groups.coord().dp, 2, 2, tokens, targets);
                  return OkStatus();
                });
            if (!r.ok()) {
              // Once broken, always broken.
              StatusOr<GridStepResult> again = g->TrainStep(
                  [](int, std::span<int32_t>, std::span<int32_t>) { return OkStatus(); });
              EXPECT_EQ(again.status().code(), StatusCode::kAborted) << again.status().ToString();
              return r.status();
            }
          }
          return OkStatus();
        }();
        std::lock_guard<std::mutex> lock(mu);
        statuses[size_t(rank)] = result;
        return result;
      });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(statuses[1].message().find("injected"), std::string::npos) << statuses[1].ToString();
  for (int r = 0; r < world; ++r) EXPECT_FALSE(statuses[size_t(r)].ok()) << "rank " << r;
  EXPECT_LT(seconds, 40.0) << "the other ranks waited out their timeouts and more";
}

TEST(GridGptTest, BadGridsAreClearErrors) {
  {  // heads not divisible by tp
    GridSpec s;
    s.tp = 3;
    GridResult r = RunGrid(s, nullptr);
    EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << r.status.ToString();
    EXPECT_NE(r.status.message().find("not divisible by tp 3"), std::string::npos)
        << r.status.ToString();
  }
  {  // more stages than units: 2 layers + embed + head = 4 units on 5 stages
    GridSpec s;
    s.pp = 5;
    GridResult r = RunGrid(s, nullptr);
    EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << r.status.ToString();
    EXPECT_NE(r.status.message().find("pp=5"), std::string::npos) << r.status.ToString();
  }
  {  // ep that does not divide dp
    GridSpec s;
    s.dp = 2;
    s.ep = 3;
    s.experts = 6;
    GridResult r = RunGrid(s, nullptr);
    EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << r.status.ToString();
    EXPECT_NE(r.status.message().find("ep 3"), std::string::npos) << r.status.ToString();
  }
  {  // interleaved with micro-batches not a multiple of pp
    GridSpec s;
    s.pp = 2;
    s.layers = 4;
    s.ga = 3;
    s.schedule = ScheduleKind::kInterleaved;
    s.virtual_stages = 2;
    GridResult r = RunGrid(s, nullptr);
    EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << r.status.ToString();
  }
}

}  // namespace
}  // namespace zs::parallel
