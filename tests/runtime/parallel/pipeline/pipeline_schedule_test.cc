// The schedules (GPipe, 1F1B, interleaved 1F1B) and the simulator: every schedule is complete,
// dependency-respecting and deadlock-free; the simulated bubble equals the closed forms; 1F1B
// bounds the micro-batches in flight; bad schedules are named.
#include "runtime/parallel/pipeline/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/parallel/pipeline/schedule_simulator.h"
#include "tests/status_is.h"

namespace zs {
namespace {

struct Config {
  ScheduleKind kind;
  int p, m, v;
};

// Every (kind, p, m, v) the builders accept in a small range.
std::vector<Config> AllConfigs() {
  std::vector<Config> out;
  for (int p = 1; p <= 5; ++p) {
    for (int m = 1; m <= 12; ++m) {
      out.push_back({ScheduleKind::kGPipe, p, m, 1});
      out.push_back({ScheduleKind::kOneFOneB, p, m, 1});
      if (m % p == 0) {
        for (int v = 1; v <= 3; ++v) out.push_back({ScheduleKind::kInterleaved, p, m, v});
      }
    }
  }
  return out;
}

std::string Name(const Config& c) {
  return std::string(ScheduleKindName(c.kind)) + " p=" + std::to_string(c.p) +
         " m=" + std::to_string(c.m) + " v=" + std::to_string(c.v);
}

TEST(PipelineScheduleTest, EverySchedulesIsCompleteOrderedAndDeadlockFree) {
  for (const Config& c : AllConfigs()) {
    SCOPED_TRACE(Name(c));
    StatusOr<PipelineSchedule> s = BuildSchedule(c.kind, c.p, c.m, c.v);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_EQ(int(s->per_rank.size()), c.p);
    EXPECT_TRUE(ValidateSchedule(*s).ok()) << ValidateSchedule(*s).ToString() << s->ToString();

    // Completeness, counted here independently of ValidateSchedule.
    std::map<std::tuple<int, int, int>, int> count;
    for (int r = 0; r < c.p; ++r) {
      for (const PipelineInstruction& ins : s->per_rank[r]) {
        EXPECT_EQ(s->RankOfChunk(ins.chunk), r);
        ++count[{int(ins.op), ins.micro_batch, ins.chunk}];
      }
    }
    EXPECT_EQ(int(count.size()), 2 * c.m * c.p * c.v);
    for (const auto& [key, n] : count) EXPECT_EQ(n, 1);

    // Each chunk's forwards and its backwards run in micro-batch order.
    for (int r = 0; r < c.p; ++r) {
      std::map<std::pair<int, int>, int> last;  // (op, chunk) -> last micro-batch
      for (const PipelineInstruction& ins : s->per_rank[r]) {
        auto [it, fresh] = last.try_emplace({int(ins.op), ins.chunk}, ins.micro_batch);
        if (!fresh) {
          EXPECT_EQ(ins.micro_batch, it->second + 1);
          it->second = ins.micro_batch;
        }
      }
    }

    // The simulation respects every data dependency and each rank's order.
    StatusOr<ScheduleSimulation> sim =
        SimulateSchedule(*s, ChunkCosts::Uniform(s->num_chunks(), 1.0, 2.0));
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    std::map<std::tuple<int, int, int>, SimulatedInstruction> ran;
    for (int r = 0; r < c.p; ++r) {
      ASSERT_EQ(sim->per_rank[r].size(), s->per_rank[r].size());
      for (size_t i = 0; i < sim->per_rank[r].size(); ++i) {
        const SimulatedInstruction& x = sim->per_rank[r][i];
        EXPECT_EQ(x.instruction, s->per_rank[r][i]);
        if (i > 0) {
          EXPECT_GE(x.start, sim->per_rank[r][i - 1].end);
        }
        ran[{int(x.instruction.op), x.instruction.micro_batch, x.instruction.chunk}] = x;
      }
    }
    const int last = s->num_chunks() - 1;
    for (const auto& [key, x] : ran) {
      const auto [op, mb, chunk] = key;
      if (op == int(PipelineOp::kForward) && chunk > 0) {
        EXPECT_GE(x.start, (ran[{op, mb, chunk - 1}].end));
      }
      if (op == int(PipelineOp::kBackward)) {
        EXPECT_GE(x.start, (ran[{int(PipelineOp::kForward), mb, chunk}].end));
        if (chunk < last) {
          EXPECT_GE(x.start, (ran[{op, mb, chunk + 1}].end));
        }
      }
    }
  }
}

TEST(PipelineScheduleTest, SimulatedBubbleMatchesTheFormulas) {
  for (const Config& c : AllConfigs()) {
    SCOPED_TRACE(Name(c));
    StatusOr<PipelineSchedule> s = BuildSchedule(c.kind, c.p, c.m, c.v);
    ASSERT_TRUE(s.ok());
    // Equal costs per chunk; a stage's work is split evenly over its v chunks.
    for (double backward_ratio : {1.0, 2.0}) {
      const double f = 1.0 / c.v;
      StatusOr<ScheduleSimulation> sim =
          SimulateSchedule(*s, ChunkCosts::Uniform(s->num_chunks(), f, backward_ratio * f));
      ASSERT_TRUE(sim.ok()) << sim.status().ToString();
      const double ideal = IdealBubbleFraction(c.kind, c.p, c.m, c.v);
      EXPECT_NEAR(sim->bubble_fraction, ideal, 1e-12) << "b/f = " << backward_ratio;
      // The makespan is the ideal one: m (f + b) of work plus (p-1)/v stages' worth of bubble.
      const double stage = (1 + backward_ratio) * f * c.v;
      EXPECT_NEAR(sim->makespan, stage * (c.m + double(c.p - 1) / c.v), 1e-9);
      for (int r = 0; r < c.p; ++r) EXPECT_NEAR(sim->busy[r], stage * c.m, 1e-9);
    }
  }
  EXPECT_DOUBLE_EQ(IdealBubbleFraction(ScheduleKind::kGPipe, 4, 8), 3.0 / 11);
  EXPECT_DOUBLE_EQ(IdealBubbleFraction(ScheduleKind::kInterleaved, 4, 8, 2), 1.5 / 9.5);
}

TEST(PipelineScheduleTest, OneFOneBBoundsMicroBatchesInFlight) {
  for (int p = 1; p <= 5; ++p) {
    for (int m = 1; m <= 12; ++m) {
      StatusOr<PipelineSchedule> ofob = BuildSchedule(ScheduleKind::kOneFOneB, p, m);
      StatusOr<PipelineSchedule> gpipe = BuildSchedule(ScheduleKind::kGPipe, p, m);
      ASSERT_TRUE(ofob.ok() && gpipe.ok());
      StatusOr<ScheduleSimulation> sim = SimulateSchedule(*ofob, ChunkCosts::Uniform(p, 1, 2));
      ASSERT_TRUE(sim.ok());
      for (int r = 0; r < p; ++r) {
        EXPECT_LE(MaxInFlight(ofob->per_rank[r]), p - r) << "p=" << p << " m=" << m;
        EXPECT_EQ(MaxInFlight(ofob->per_rank[r]), std::min(p - r, m));
        EXPECT_EQ(sim->max_in_flight[r], MaxInFlight(ofob->per_rank[r]));
        EXPECT_EQ(MaxInFlight(gpipe->per_rank[r]), m);
      }
    }
  }
}

TEST(PipelineScheduleTest, OneFOneBShape) {
  StatusOr<PipelineSchedule> s = BuildSchedule(ScheduleKind::kOneFOneB, 3, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ToString(),
            "rank 0: F0c0 F1c0 F2c0 B0c0 F3c0 B1c0 B2c0 B3c0\n"
            "rank 1: F0c1 F1c1 B0c1 F2c1 B1c1 F3c1 B2c1 B3c1\n"
            "rank 2: F0c2 B0c2 F1c2 B1c2 F2c2 B2c2 F3c2 B3c2\n");
}

TEST(PipelineScheduleTest, InterleavedShape) {
  // Megatron-LM's order: groups of p micro-batches per local chunk, backwards from the last;
  // rank r warms up with 2 (p - r - 1) + (v - 1) p forwards (4 on rank 0, 2 on rank 1).
  StatusOr<PipelineSchedule> s = BuildSchedule(ScheduleKind::kInterleaved, 2, 4, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ToString(),
            "rank 0: F0c0 F1c0 F0c2 F1c2 F2c0 B0c2 F3c0 B1c2 F2c2 B0c0 F3c2 B1c0 B2c2 B3c2 "
            "B2c0 B3c0\n"
            "rank 1: F0c1 F1c1 F0c3 B0c3 F1c3 B1c3 F2c1 B0c1 F3c1 B1c1 F2c3 B2c3 F3c3 B3c3 "
            "B2c1 B3c1\n");
}

// Evaluation passes: forwards only, each (micro-batch, chunk) once on the rank holding the chunk,
// valid (message order, no deadlock) for every m, also m not a multiple of p with v > 1.
TEST(PipelineScheduleTest, ForwardOnlyPassesAreCompleteAndDeadlockFree) {
  for (int p = 1; p <= 5; ++p) {
    for (int m = 1; m <= 9; ++m) {
      for (int v = 1; v <= 3; ++v) {
        SCOPED_TRACE(testing::Message() << "p=" << p << " m=" << m << " v=" << v);
        StatusOr<PipelineSchedule> s =
            BuildForwardOnlySchedule(ScheduleKind::kInterleaved, p, m, v);
        ASSERT_TRUE(s.ok()) << s.status().ToString();
        EXPECT_TRUE(s->forward_only);
        EXPECT_TRUE(ValidateSchedule(*s).ok()) << ValidateSchedule(*s).ToString() << s->ToString();
        std::map<std::pair<int, int>, int> count;
        for (int r = 0; r < p; ++r) {
          for (const PipelineInstruction& ins : s->per_rank[r]) {
            EXPECT_EQ(ins.op, PipelineOp::kForward);
            EXPECT_EQ(s->RankOfChunk(ins.chunk), r);
            ++count[{ins.micro_batch, ins.chunk}];
          }
        }
        EXPECT_EQ(int(count.size()), m * p * v);
        for (const auto& [key, n] : count) EXPECT_EQ(n, 1);
      }
    }
  }
  StatusOr<PipelineSchedule> s = BuildForwardOnlySchedule(ScheduleKind::kInterleaved, 2, 3, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ToString(),
            "rank 0: F0c0 F1c0 F0c2 F1c2 F2c0 F2c2\n"
            "rank 1: F0c1 F1c1 F0c3 F1c3 F2c1 F2c3\n");
  EXPECT_TRUE(StatusIs(BuildForwardOnlySchedule(ScheduleKind::kOneFOneB, 2, 0, 1).status(),
                       StatusCode::kInvalidArgument, {"m=0"}));
  // A training schedule's backward is not allowed in a forward-only pass, and a training
  // schedule's forwards alone are not a training schedule.
  StatusOr<PipelineSchedule> training = BuildSchedule(ScheduleKind::kOneFOneB, 2, 2, 1);
  ASSERT_TRUE(training.ok());
  training->forward_only = true;
  EXPECT_TRUE(StatusIs(ValidateScheduleStructure(*training), StatusCode::kInvalidArgument,
                       {"a backward in a forward-only pass"}));
  s->forward_only = false;
  EXPECT_TRUE(StatusIs(ValidateScheduleStructure(*s), StatusCode::kInvalidArgument,
                       {"never runs the backward"}));
}

TEST(PipelineScheduleTest, BuildErrorsNameTheValues) {
  EXPECT_TRUE(StatusIs(BuildSchedule(ScheduleKind::kInterleaved, 4, 6, 2).status(),
                       StatusCode::kInvalidArgument, {"m=6", "p=4", "v=2", "divisible"}));
  EXPECT_TRUE(StatusIs(BuildSchedule(ScheduleKind::kGPipe, 2, 4, 2).status(),
                       StatusCode::kInvalidArgument, {"gpipe", "v=2"}));
  EXPECT_TRUE(StatusIs(BuildSchedule(ScheduleKind::kOneFOneB, 0, 4).status(),
                       StatusCode::kInvalidArgument, {"p=0"}));
  EXPECT_TRUE(StatusIs(BuildSchedule(ScheduleKind::kOneFOneB, 2, 0).status(),
                       StatusCode::kInvalidArgument, {"m=0"}));
  EXPECT_EQ(*ParseScheduleKind("1f1b"), ScheduleKind::kOneFOneB);
  EXPECT_EQ(*ParseScheduleKind("interleaved"), ScheduleKind::kInterleaved);
  EXPECT_TRUE(
      StatusIs(ParseScheduleKind("zb").status(), StatusCode::kInvalidArgument, {"'zb'", "gpipe"}));
}

PipelineInstruction F(int mb, int c) { return {PipelineOp::kForward, mb, c}; }
PipelineInstruction B(int mb, int c) { return {PipelineOp::kBackward, mb, c}; }

PipelineSchedule Handmade(std::vector<std::vector<PipelineInstruction>> lists, int m) {
  PipelineSchedule s;
  s.kind = ScheduleKind::kOneFOneB;
  s.ranks = int(lists.size());
  s.micro_batches = m;
  s.per_rank = std::move(lists);
  return s;
}

TEST(PipelineScheduleTest, DeadlockIsNamed) {
  // Rank 0 wants B0's gradient before sending F1; rank 1 wants F1 before sending B0's gradient.
  PipelineSchedule s =
      Handmade({{F(0, 0), B(0, 0), F(1, 0), B(1, 0)}, {F(0, 1), F(1, 1), B(0, 1), B(1, 1)}}, 2);
  EXPECT_TRUE(ValidateScheduleStructure(s).ok());
  EXPECT_TRUE(StatusIs(ValidateSchedule(s), StatusCode::kInvalidArgument,
                       {"deadlocks", "rank 0 at instruction 1 (backward of micro-batch 0, chunk 0)",
                        "rank 1 at instruction 1 (forward of micro-batch 1, chunk 1)"}));
}

TEST(PipelineScheduleTest, MessagesOutOfOrderAreNamed) {
  // Rank 1 takes micro-batch 1's activation first: without tags it would get micro-batch 0's.
  PipelineSchedule s =
      Handmade({{F(0, 0), F(1, 0), B(0, 0), B(1, 0)}, {F(1, 1), F(0, 1), B(0, 1), B(1, 1)}}, 2);
  EXPECT_TRUE(ValidateScheduleStructure(s).ok());
  EXPECT_TRUE(StatusIs(ValidateSchedule(s), StatusCode::kInvalidArgument,
                       {"activations message 0 from rank 0 to rank 1", "micro-batch 0 of chunk 0",
                        "micro-batch 1 of chunk 0"}));
}

TEST(PipelineScheduleTest, StructureErrorsAreNamed) {
  EXPECT_TRUE(StatusIs(ValidateSchedule(Handmade({{F(0, 0), B(0, 0)}, {F(0, 1)}}, 1)),
                       StatusCode::kInvalidArgument,
                       {"rank 1 never runs the backward of micro-batch 0, chunk 1"}));
  EXPECT_TRUE(
      StatusIs(ValidateSchedule(Handmade({{F(0, 0), F(0, 0), B(0, 0)}, {F(0, 1), B(0, 1)}}, 1)),
               StatusCode::kInvalidArgument,
               {"rank 0 instruction 1", "already scheduled as instruction 0"}));
  EXPECT_TRUE(StatusIs(ValidateSchedule(Handmade({{F(0, 1), B(0, 0)}, {F(0, 0), B(0, 1)}}, 1)),
                       StatusCode::kInvalidArgument, {"rank 0 instruction 0", "held by rank 1"}));
  EXPECT_TRUE(StatusIs(ValidateSchedule(Handmade({{B(0, 0), F(0, 0)}, {F(0, 1), B(0, 1)}}, 1)),
                       StatusCode::kInvalidArgument, {"comes before its forward"}));
  EXPECT_TRUE(StatusIs(ValidateSchedule(Handmade({{F(3, 0)}, {}}, 2)), StatusCode::kInvalidArgument,
                       {"out of range"}));
  PipelineSchedule wrong = Handmade({{F(0, 0), B(0, 0)}}, 1);
  wrong.ranks = 2;
  EXPECT_TRUE(StatusIs(ValidateSchedule(wrong), StatusCode::kInvalidArgument,
                       {"p=2 ranks has 1 instruction lists"}));
  StatusOr<PipelineSchedule> ok = BuildSchedule(ScheduleKind::kGPipe, 2, 2);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(StatusIs(SimulateSchedule(*ok, ChunkCosts::Uniform(3, 1, 1)).status(),
                       StatusCode::kInvalidArgument, {"3 forward", "for 2 chunks"}));
  ChunkCosts negative = ChunkCosts::Uniform(2, 1, 1);
  negative.backward[1] = -1;
  EXPECT_TRUE(StatusIs(SimulateSchedule(*ok, negative).status(), StatusCode::kInvalidArgument,
                       {"chunk 1", "backward -1"}));
}

TEST(PipelineScheduleTest, TransferCostDelaysCrossRankDependencies) {
  StatusOr<PipelineSchedule> s = BuildSchedule(ScheduleKind::kGPipe, 2, 1);
  ASSERT_TRUE(s.ok());
  ChunkCosts costs = ChunkCosts::Uniform(2, 1, 2);
  costs.transfer = 0.5;
  StatusOr<ScheduleSimulation> sim = SimulateSchedule(*s, costs);
  ASSERT_TRUE(sim.ok());
  // F0c0 [0,1], F0c1 [1.5,2.5], B0c1 [2.5,4.5], B0c0 [5,7].
  EXPECT_DOUBLE_EQ(sim->makespan, 7);
  EXPECT_DOUBLE_EQ(sim->per_rank[1][0].start, 1.5);
  EXPECT_DOUBLE_EQ(sim->per_rank[0][1].start, 5);
}

// Per-instruction costs equal to the chunk costs replay the chunk simulation exactly, for every
// schedule: the chunk form is the instruction form with equal micro-batches.
TEST(PipelineScheduleTest, InstructionCostsFromChunksMatchChunkCosts) {
  for (auto [kind, v] : {std::pair{ScheduleKind::kGPipe, 1}, std::pair{ScheduleKind::kOneFOneB, 1},
                         std::pair{ScheduleKind::kInterleaved, 2}}) {
    StatusOr<PipelineSchedule> s = BuildSchedule(kind, 3, 6, v);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ChunkCosts chunks = ChunkCosts::Uniform(s->num_chunks(), 1, 2);
    for (int c = 0; c < s->num_chunks(); ++c) chunks.forward[c] += 0.25 * c;
    chunks.transfer = 0.125;
    StatusOr<ScheduleSimulation> a = SimulateSchedule(*s, chunks);
    StatusOr<ScheduleSimulation> b =
        SimulateSchedule(*s, InstructionCosts::FromChunks(chunks, s->micro_batches));
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->makespan, b->makespan) << ScheduleKindName(kind);
    EXPECT_EQ(a->bubble_fraction, b->bubble_fraction) << ScheduleKindName(kind);
    for (int r = 0; r < s->ranks; ++r) {
      ASSERT_EQ(a->per_rank[r].size(), b->per_rank[r].size());
      for (size_t i = 0; i < a->per_rank[r].size(); ++i) {
        EXPECT_EQ(a->per_rank[r][i].start, b->per_rank[r][i].start);
        EXPECT_EQ(a->per_rank[r][i].end, b->per_rank[r][i].end);
      }
    }
  }
}

// One slow instruction delays exactly what depends on it (GPipe, p = 2, m = 2, forward 1,
// backward 2; Forward(0, chunk 0) takes 3 instead of 1):
//   rank 0: F(0,0) [0,3]  F(1,0) [3,4]                B(0,0) [7,9]  B(1,0) [9,11]
//   rank 1:               F(0,1) [3,4]  F(1,1) [4,5]  B(0,1) [5,7]  B(1,1) [7,9]
TEST(PipelineScheduleTest, InstructionCostsDelayOnlyDependents) {
  StatusOr<PipelineSchedule> s = BuildSchedule(ScheduleKind::kGPipe, 2, 2);
  ASSERT_TRUE(s.ok());
  InstructionCosts costs = InstructionCosts::FromChunks(ChunkCosts::Uniform(2, 1, 2), 2);
  costs.forward[0 * 2 + 0] = 3;
  StatusOr<ScheduleSimulation> sim = SimulateSchedule(*s, costs);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  EXPECT_DOUBLE_EQ(sim->makespan, 11);  // 9 with equal costs
  EXPECT_DOUBLE_EQ(sim->per_rank[0][1].start, 3);
  EXPECT_DOUBLE_EQ(sim->per_rank[1][0].start, 3);
  EXPECT_DOUBLE_EQ(sim->per_rank[1][2].start, 5);
  EXPECT_DOUBLE_EQ(sim->per_rank[0][2].start, 7);
  EXPECT_DOUBLE_EQ(sim->busy[0], 8);
  EXPECT_DOUBLE_EQ(sim->busy[1], 6);
  EXPECT_DOUBLE_EQ(sim->bubble_fraction, 1.0 - 14.0 / 22.0);

  InstructionCosts short_costs = costs;
  short_costs.backward.pop_back();
  EXPECT_TRUE(StatusIs(SimulateSchedule(*s, short_costs).status(), StatusCode::kInvalidArgument,
                       {"4 forward and 3 backward", "2 chunks x 2 micro-batches"}));
  InstructionCosts negative = costs;
  negative.backward[1 * 2 + 0] = -1;
  EXPECT_TRUE(StatusIs(SimulateSchedule(*s, negative).status(), StatusCode::kInvalidArgument,
                       {"chunk 1 micro-batch 0", "backward -1"}));
}

}  // namespace
}  // namespace zs
