// The segment cost probe and GridGpt's partitions by cost (ranks as threads, local backend).
// - MeasureSegmentCosts returns positive, finite costs, bit-identical on every rank of a
//   tp x pp x dp world (the costs are combined over the world), also with recompute and
//   sequence parallelism; experts and bad options are clear errors; a rank that fails to
//   measure makes the others fail soon, naming it.
// - A partition by explicit costs puts the segments where the costs say (a heavy head takes a
//   stage of its own; a heavy embedding one of its own), unlike the parameter-count default;
//   wrong cost lists are errors naming the counts.
// - Training with the measured partition, and with a lopsided explicit one, matches the
//   one-rank run (losses within 1e-5 relative, the global gradient norm within 1e-6), as
//   grid_gpt_test checks for the parameter-count partition.
// No timing is asserted: only that the costs exist, agree between ranks and are used.
#include "runtime/parallel/gpt/segment_cost_probe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/nn/gpt.h"
#include "runtime/parallel/gpt/grid_gpt.h"
#include "tests/runtime/parallel/gpt/grid_parity.h"

namespace zs::parallel {
namespace {

// The small GPT, its sample stream, the optimizer and the one-rank reference are
// grid_gpt_test's (grid_parity.h).
using parity::kSeq;
using parity::kSteps;
using parity::SmallGpt;

CommOptions Options() {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(60'000);
  return o;
}

// ---- the probe ----

struct ProbeRun {
  Status status;
  std::vector<SegmentKindCosts> per_rank;
};

ProbeRun Probe(int tp, int pp, int dp, const SegmentCostProbeOptions& options) {
  ProbeRun out;
  const int world = tp * pp * dp;
  out.per_rank.resize(size_t(world));
  std::mutex mu;
  out.status = RunLocalRanks(world, Options(), [&](int rank, Communicator& comm,
                                                    MemoryTracker& tracker) -> Status {
    ZS_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(tp, pp, dp, world));
    ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(comm, grid));
    ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
    ZS_ASSIGN_OR_RETURN(SegmentKindCosts costs,
                        MeasureSegmentCosts(options, groups, *device, &tracker));
    std::lock_guard<std::mutex> lock(mu);
    out.per_rank[size_t(rank)] = costs;
    return OkStatus();
  });
  return out;
}

SegmentCostProbeOptions ProbeOptions() {
  SegmentCostProbeOptions o;
  o.model.gpt = SmallGpt(6);  // the probe builds one layer whatever the count
  o.micro_batch = 2;
  o.seq = kSeq;
  o.repeats = 3;
  return o;
}

void ExpectPositiveAndAgreed(const ProbeRun& run) {
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  const SegmentKindCosts& first = run.per_rank[0];
  for (double c : {first.embed, first.block, first.head}) {
    EXPECT_TRUE(std::isfinite(c) && c > 0) << first.ToString();
  }
  for (size_t r = 1; r < run.per_rank.size(); ++r) {
    // Bit for bit: every rank partitions from these.
    EXPECT_EQ(run.per_rank[r].embed, first.embed) << "rank " << r;
    EXPECT_EQ(run.per_rank[r].block, first.block) << "rank " << r;
    EXPECT_EQ(run.per_rank[r].head, first.head) << "rank " << r;
  }
  std::printf("  probe: %s\n", first.ToString().c_str());
}

TEST(SegmentCostProbeTest, CostsArePositiveFiniteAndTheSameOnEveryRank) {
  SegmentCostProbeOptions o = ProbeOptions();
  ExpectPositiveAndAgreed(Probe(2, 2, 2, o));  // tp collectives inside the probe, 8 ranks
  o.recompute = true;
  o.model.sequence_parallel = true;
  ExpectPositiveAndAgreed(Probe(2, 1, 1, o));
}

TEST(SegmentCostProbeTest, PerSegmentExpandsTheKinds) {
  const SegmentKindCosts k{.embed = 1, .block = 2, .head = 3};
  EXPECT_EQ(k.PerSegment(3), (std::vector<double>{1, 2, 2, 2, 3}));
  EXPECT_EQ(k.PerSegment(0), (std::vector<double>{1, 3}));
}

TEST(SegmentCostProbeTest, ExpertsAndBadOptionsAreClearErrors) {
  SegmentCostProbeOptions o = ProbeOptions();
  o.model.moe.experts = 4;
  ProbeRun r = Probe(1, 1, 1, o);
  EXPECT_EQ(r.status.code(), StatusCode::kUnimplemented) << r.status.ToString();
  EXPECT_NE(r.status.message().find("experts (4 per block)"), std::string::npos)
      << r.status.ToString();
  o = ProbeOptions();
  o.repeats = 0;
  r = Probe(1, 1, 1, o);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << r.status.ToString();
  EXPECT_NE(r.status.message().find("repeats 0"), std::string::npos) << r.status.ToString();
  o = ProbeOptions();
  o.seq = kSeq + 1;
  r = Probe(1, 1, 1, o);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << r.status.ToString();
  EXPECT_NE(r.status.message().find("seq 9"), std::string::npos) << r.status.ToString();
}

// A rank whose probe fails (its device cannot hold the probe's engine) fails with its own
// error; the others fail soon with Aborted naming it, instead of waiting out the timeout.
TEST(SegmentCostProbeTest, ARankFailingToMeasureFailsEveryRankSoon) {
  const int world = 2;
  std::vector<Status> statuses(world);
  std::mutex mu;
  CommOptions options;
  options.timeout = std::chrono::milliseconds(30'000);
  const auto start = std::chrono::steady_clock::now();
  (void)RunLocalRanks(world, options, [&](int rank, Communicator& comm,
                                          MemoryTracker& tracker) -> Status {
    Status result = [&]() -> Status {
      ZS_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(1, 2, 1, world));
      ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(comm, grid));
      ZS_ASSIGN_OR_RETURN(auto device,
                          CreateDevice(rank == 1 ? "budgeted-cpu:1024" : "cpu", tracker));
      return MeasureSegmentCosts(ProbeOptions(), groups, *device, &tracker).status();
    }();
    std::lock_guard<std::mutex> lock(mu);
    statuses[size_t(rank)] = result;
    return result;
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(statuses[0].code(), StatusCode::kAborted) << statuses[0].ToString();
  EXPECT_NE(statuses[0].message().find("world rank 1 failed"), std::string::npos)
      << statuses[0].ToString();
  EXPECT_FALSE(statuses[1].ok());
  EXPECT_NE(statuses[1].message().find("on world rank 1"), std::string::npos)
      << statuses[1].ToString();
  EXPECT_LT(seconds, 20.0) << "rank 0 waited out its timeout";
}

// ---- GridGpt's partition ----

struct Losses {
  Status status;
  std::vector<double> loss, norm;  // per step
};

struct GridRun {
  int tp = 1, pp = 2, dp = 1;
  int layers = 4;
  int ga = 4;
  int64_t micro_batch = 2;
  int steps = kSteps;  // 0: only Create
  PartitionCost partition = PartitionCost::kParams;
  std::vector<double> segment_costs;
  parity::GridSpec Parity() const {
    parity::GridSpec p;
    p.tp = tp;
    p.pp = pp;
    p.dp = dp;
    p.layers = layers;
    p.ga = ga;
    p.micro_batch = micro_batch;
    return p;
  }
};

struct GridOutcome {
  Losses losses;                        // rank 0's
  std::vector<std::string> partitions;  // per rank: PartitionString()
  std::vector<std::vector<double>> segment_costs;  // per rank
  std::vector<std::string> roles;       // per rank
};

GridOutcome RunGrid(const GridRun& spec) {
  GridOutcome out;
  const int world = spec.tp * spec.pp * spec.dp;
  out.partitions.resize(size_t(world));
  out.segment_costs.resize(size_t(world));
  out.roles.resize(size_t(world));
  std::mutex mu;
  out.losses.status = RunLocalRanks(world, Options(), [&](int rank, Communicator& comm,
                                                          MemoryTracker& tracker) -> Status {
    ZS_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(spec.tp, spec.pp, spec.dp, world));
    ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(comm, grid));
    ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
    GridGptOptions o = parity::Options(spec.Parity());
    o.partition = spec.partition;
    o.segment_costs = spec.segment_costs;
    o.probe_repeats = 3;
    ZS_ASSIGN_OR_RETURN(auto g, GridGpt::Create(o, groups, *device, &tracker));
    const int dp_rank = groups.coord().dp;
    Losses mine;
    for (int step = 0; step < spec.steps; ++step) {
      ZS_ASSIGN_OR_RETURN(
          GridStepResult r,
          g->TrainStep([&](int mb, std::span<int32_t> tokens, std::span<int32_t> targets) {
            parity::Fill(step, mb, dp_rank, spec.dp, spec.micro_batch, tokens, targets);
            return OkStatus();
          }));
      mine.loss.push_back(r.loss);
      mine.norm.push_back(r.step.grad_norm);
    }
    std::lock_guard<std::mutex> lock(mu);
    if (rank == 0) {
      out.losses.loss = mine.loss;
      out.losses.norm = mine.norm;
    }
    out.partitions[size_t(rank)] = g->PartitionString();
    out.segment_costs[size_t(rank)] = g->segment_costs();
    out.roles[size_t(rank)] = g->RoleString();
    return OkStatus();
  });
  return out;
}

void ExpectMatchesOneRank(const GridRun& spec) {
  SCOPED_TRACE(fmt::format("pp {} dp {} layers {} partition {}", spec.pp, spec.dp, spec.layers,
                           PartitionCostName(spec.partition)));
  const StatusOr<parity::Reference> ref = parity::RunReference(spec.Parity());
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const GridOutcome grid = RunGrid(spec);
  ASSERT_TRUE(grid.losses.status.ok()) << grid.losses.status.ToString();
  // Losses and norms only (the parameters are grid_gpt_test's and the worker's to compare).
  parity::ParamDiff none;
  none.count = 1;
  for (const std::string& failure :
       parity::ParityFailures(grid.losses.loss, grid.losses.norm, none, *ref)) {
    ADD_FAILURE() << failure;
  }
  std::printf("  %s\n  rank 0: %s\n", grid.partitions[0].c_str(), grid.roles[0].c_str());
}

// The units rank `r` holds, by name, from its role string "tp 0/1, pp 0/2 (embed block.0), ...".
std::string UnitsOf(const std::string& role) {
  const size_t open = role.find('('), close = role.find(')');
  return open == std::string::npos ? "" : role.substr(open + 1, close - open - 1);
}

TEST(GridGptPartitionTest, ExplicitCostsPutTheSegmentsWhereTheCostsSay) {
  GridRun s;
  s.steps = 0;
  s.partition = PartitionCost::kExplicit;
  // A head as heavy as the rest together: the first stage takes every layer.
  s.segment_costs = {1, 1, 1, 1, 1, 5};
  GridOutcome heavy_head = RunGrid(s);
  ASSERT_TRUE(heavy_head.losses.status.ok()) << heavy_head.losses.status.ToString();
  EXPECT_EQ(UnitsOf(heavy_head.roles[0]), "embed block.0 block.1 block.2 block.3");
  EXPECT_EQ(UnitsOf(heavy_head.roles[1]), "head");
  EXPECT_NE(heavy_head.partitions[0].find("by explicit costs"), std::string::npos)
      << heavy_head.partitions[0];
  EXPECT_EQ(heavy_head.segment_costs[1], s.segment_costs);
  // A heavy embedding: the last stage takes every layer.
  s.segment_costs = {5, 1, 1, 1, 1, 1};
  GridOutcome heavy_embed = RunGrid(s);
  ASSERT_TRUE(heavy_embed.losses.status.ok()) << heavy_embed.losses.status.ToString();
  EXPECT_EQ(UnitsOf(heavy_embed.roles[0]), "embed");
  EXPECT_EQ(UnitsOf(heavy_embed.roles[1]), "block.0 block.1 block.2 block.3 head");
  // The parameter-count default splits this model in the middle (the blocks hold nearly all
  // the parameters), so the explicit costs above were what moved the units.
  s.partition = PartitionCost::kParams;
  GridOutcome params = RunGrid(s);
  ASSERT_TRUE(params.losses.status.ok()) << params.losses.status.ToString();
  EXPECT_NE(UnitsOf(params.roles[1]), "head");
  EXPECT_NE(UnitsOf(params.roles[0]), "embed");
  EXPECT_NE(params.partitions[0].find("by parameter count"), std::string::npos)
      << params.partitions[0];
}

TEST(GridGptPartitionTest, BadExplicitCostsAreClearErrors) {
  GridRun s;
  s.steps = 0;
  s.partition = PartitionCost::kExplicit;
  s.segment_costs = {1, 1, 1};
  GridOutcome r = RunGrid(s);
  EXPECT_EQ(r.losses.status.code(), StatusCode::kInvalidArgument) << r.losses.status.ToString();
  EXPECT_NE(r.losses.status.message().find("3 given, the GPT has 6 segments"),
            std::string::npos)
      << r.losses.status.ToString();
  s.segment_costs = {1, 1, -1, 1, 1, 1};
  r = RunGrid(s);
  EXPECT_EQ(r.losses.status.code(), StatusCode::kInvalidArgument) << r.losses.status.ToString();
  EXPECT_NE(r.losses.status.message().find("cost -1"), std::string::npos)
      << r.losses.status.ToString();
}

TEST(GridGptPartitionTest, PartitionCostNamesRoundTrip) {
  for (PartitionCost c :
       {PartitionCost::kParams, PartitionCost::kMeasured, PartitionCost::kExplicit}) {
    StatusOr<PartitionCost> parsed = ParsePartitionCost(PartitionCostName(c));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, c);
  }
  StatusOr<PartitionCost> bad = ParsePartitionCost("flops");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'flops'"), std::string::npos);
}

TEST(GridGptPartitionTest, MeasuredPartitionIsTheSameOnEveryRankAndTrainsLikeOneRank) {
  GridRun s;
  s.partition = PartitionCost::kMeasured;
  s.dp = 2;
  s.ga = 2;
  s.steps = 0;
  GridOutcome created = RunGrid(s);
  ASSERT_TRUE(created.losses.status.ok()) << created.losses.status.ToString();
  for (size_t r = 0; r < created.partitions.size(); ++r) {
    EXPECT_EQ(created.partitions[r], created.partitions[0]) << "rank " << r;
    EXPECT_EQ(created.segment_costs[r], created.segment_costs[0]) << "rank " << r;
  }
  EXPECT_NE(created.partitions[0].find("by measured seconds"), std::string::npos)
      << created.partitions[0];
  ASSERT_EQ(created.segment_costs[0].size(), size_t(s.layers + 2));
  for (double c : created.segment_costs[0]) EXPECT_TRUE(std::isfinite(c) && c > 0);
  s.steps = kSteps;
  ExpectMatchesOneRank(s);
}

TEST(GridGptPartitionTest, LopsidedExplicitPartitionTrainsLikeOneRank) {
  GridRun s;
  s.partition = PartitionCost::kExplicit;
  s.segment_costs = {1, 1, 1, 1, 1, 5};  // the last stage holds only the head
  ExpectMatchesOneRank(s);
}

TEST(GridGptPartitionTest, MeasuringAModelWithExpertsIsUnimplemented) {
  const int world = 2;
  Status status = RunLocalRanks(world, Options(), [&](int, Communicator& comm,
                                                      MemoryTracker& tracker) -> Status {
    ZS_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(1, 2, 1, world));
    ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(comm, grid));
    ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
    parity::GridSpec spec;
    spec.pp = 2;
    spec.experts = 2;
    GridGptOptions o = parity::Options(spec);
    o.partition = PartitionCost::kMeasured;
    return GridGpt::Create(o, groups, *device, &tracker).status();
  });
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented) << status.ToString();
}

}  // namespace
}  // namespace zs::parallel
