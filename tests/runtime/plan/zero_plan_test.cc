// zero-plan's library and command line: the ZeRO paper's 7.5B / 64-rank table, a
// trillion-parameter GPT on 1024 devices planned fast, errors that name the flag and the value,
// and the recommendation in clear cases.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "runtime/plan/cluster_plan.h"
#include "runtime/plan/gpt_plan_model.h"

namespace zs {
namespace {

EngineConfig MixedPrecision() {
  EngineConfig c;
  c.bf16.enabled = true;
  return c;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Runs the tool; returns its exit code and its stdout and stderr together.
std::pair<int, std::string> RunTool(const std::string& args) {
  const std::string cmd = std::string(ZS_ZERO_PLAN) + " " + args + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int status = pclose(f);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(ZeroPlan, PaperTableFor7p5BOn64Ranks) {
  auto rows = PaperTable(7.5e9, 64, MixedPrecision(), 4096);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 4u);
  const double paper_gb[] = {120.0, 31.4, 16.6, 1.9};  // the paper's Figure 1, rounded
  for (const PaperRow& r : *rows) {
    SCOPED_TRACE(r.stage);
    EXPECT_NEAR(r.paper_bytes / 1e9, paper_gb[r.stage], 0.05);
    // The layout's model states are the paper's plus padding: within 0.5% here.
    EXPECT_GE(r.real_model_states, r.paper_bytes);
    EXPECT_LT(r.real_model_states, 1.005 * r.paper_bytes);
    EXPECT_EQ(r.real.numel, int64_t(7.5e9));
    // The peak adds the buffers (buckets, staging, gathered units, fp32 views), never less.
    EXPECT_GE(r.real_total, r.real_model_states);
  }
  // Stage 3 gathers units: its peak has gathered parameters; stages 0-2 none.
  EXPECT_GT((*rows)[3].real.Peak(MemoryTier::kDevice, MemoryCategory::kGatheredParameters), 0);
  EXPECT_EQ((*rows)[2].real.Peak(MemoryTier::kDevice, MemoryCategory::kGatheredParameters), 0);
  const std::string table = FormatPaperTable(7.5e9, 64, *rows);
  EXPECT_NE(table.find("120.0 GB"), std::string::npos) << table;
  EXPECT_NE(table.find("31.4 GB"), std::string::npos) << table;
  EXPECT_NE(table.find("16.6 GB"), std::string::npos) << table;
  EXPECT_NE(table.find("1.9 GB"), std::string::npos) << table;
  EXPECT_NE(table.find("padding"), std::string::npos) << table;
}

const GptShape kTrillion{/*layers=*/128, /*hidden=*/25600,
                         /*heads=*/160,  /*vocab=*/51200,
                         /*seq=*/2048,   /*micro_batch=*/1};

TEST(ZeroPlan, TrillionParametersOn1024DevicesPlanFast) {
  ASSERT_GT(GptParameterCount(kTrillion), int64_t(1e12));
  ClusterSpec cluster;
  cluster.devices = 1024;
  cluster.device_memory = 80e9;
  const auto start = std::chrono::steady_clock::now();
  for (int stage = 0; stage <= 3; ++stage) {
    PlanChoice c{GridShape{8, 16, 8}, stage, OffloadChoice::kNone, true, 500'000'000};
    auto row = PlanGpt(kTrillion, MixedPrecision(), c, 16, cluster);
    ASSERT_TRUE(row.ok()) << row.status().ToString();
    // About 1e12 / (8 * 16) parameters per rank: stage 0 holds 16 bytes of each (~126 GB).
    const double per_rank = double(row->worst.numel);
    EXPECT_GT(per_rank, 0.9e12 / 128);
    EXPECT_LT(per_rank, 1.3e12 / 128);
    if (stage == 0) {
      EXPECT_FALSE(row->fits) << row->verdict;
    }
  }
  auto rec = Recommend(kTrillion, MixedPrecision(), 16, cluster);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_TRUE(rec->found) << rec->why;
  EXPECT_EQ(rec->best.choice.grid.world(), 1024);
  EXPECT_LE(double(rec->best.device_bytes), 80e9);
  // Generous: it takes about a second; this only catches per-element work.
  EXPECT_LT(Seconds(start), 60.0);
}

TEST(ZeroPlan, BadInputsNameTheFlagAndValue) {
  ClusterSpec cluster;
  cluster.devices = 0;
  EXPECT_NE(CheckCluster(cluster).message().find("--devices 0"), std::string::npos);
  cluster.devices = 8;
  cluster.device_memory = -1e9;
  EXPECT_NE(CheckCluster(cluster).message().find("--device-memory -1 "), std::string::npos)
      << CheckCluster(cluster).message();
  cluster.device_memory = 80e9;
  cluster.nvme = -2e9;
  EXPECT_NE(CheckCluster(cluster).message().find("--nvme -2 "), std::string::npos);

  auto bad_tp = GptStages(kTrillion, GridShape{3, 1, 1}, false, 1);
  ASSERT_FALSE(bad_tp.ok());
  EXPECT_NE(bad_tp.status().message().find("--heads 160 is not divisible by --tp 3"),
            std::string::npos)
      << bad_tp.status().message();
  GptShape zero_layers = kTrillion;
  zero_layers.layers = 0;
  auto bad_layers = GptStages(zero_layers, GridShape{1, 1, 1}, false, 1);
  ASSERT_FALSE(bad_layers.ok());
  EXPECT_NE(bad_layers.status().message().find("--layers 0"), std::string::npos);
  auto bad_pp = GptStages(kTrillion, GridShape{1, 200, 1}, false, 1);
  ASSERT_FALSE(bad_pp.ok());
  EXPECT_NE(bad_pp.status().message().find("--pp 200"), std::string::npos);

  auto bad_chunks =
      GptStages(kTrillion, GridShape{1, 64, 1, ScheduleKind::kInterleaved, 4}, false, 64);
  ASSERT_FALSE(bad_chunks.ok());
  EXPECT_NE(bad_chunks.status().message().find("--pp 64 x --virtual-stages 4"), std::string::npos)
      << bad_chunks.status().message();
  auto bad_schedule =
      GptStages(kTrillion, GridShape{1, 4, 1, ScheduleKind::kOneFOneB, 2}, false, 8);
  ASSERT_FALSE(bad_schedule.ok());
  EXPECT_NE(bad_schedule.status().message().find("only the interleaved schedule"),
            std::string::npos)
      << bad_schedule.status().message();

  auto bad_params = PaperTable(0, 64, MixedPrecision(), 4096);
  ASSERT_FALSE(bad_params.ok());
  EXPECT_NE(bad_params.status().message().find("--params 0"), std::string::npos);
  auto bad_dp = PaperTable(7.5e9, 0, MixedPrecision(), 4096);
  ASSERT_FALSE(bad_dp.ok());
  EXPECT_NE(bad_dp.status().message().find("--dp 0"), std::string::npos);

  ClusterSpec eight;
  eight.devices = 8;
  auto mismatch = PlanGpt(kTrillion, MixedPrecision(),
                          PlanChoice{GridShape{1, 1, 4}, 0, OffloadChoice::kNone}, 1, eight);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("is not --devices 8"), std::string::npos);
  auto offload0 =
      PlanGpt(kTrillion, MixedPrecision(),
              PlanChoice{GridShape{1, 1, 8}, 0, OffloadChoice::kCpuOptimizer}, 1, eight);
  ASSERT_FALSE(offload0.ok());
  EXPECT_NE(offload0.status().message().find("--stage 0"), std::string::npos);
}

TEST(ZeroPlan, CommandLineErrorsNameTheFlag) {
  auto [code, out] = RunTool("--params 7.5e9 --dp 0");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--dp 0"), std::string::npos) << out;
  std::tie(code, out) = RunTool("--layers 2 --hidden 30 --heads 4 --devices 1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--hidden 30 is not a multiple of --heads 4"), std::string::npos) << out;
  std::tie(code, out) = RunTool("--params 1e9 --dp 8 --precision fp8");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--precision"), std::string::npos) << out;
  std::tie(code, out) = RunTool("--layers 2 --hidden 64 --heads 4 --devices 6 --tp 4");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--devices 6"), std::string::npos) << out;
  std::tie(code, out) = RunTool("--layers 2 --hidden 64 --heads 4 --devices 8 --host-memory -3");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--host-memory -3 "), std::string::npos) << out;
  std::tie(code, out) = RunTool("--layers 2 --hidden 64 --heads 4 --devices 8 --micro-batch 0");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--micro-batch 0"), std::string::npos) << out;
  std::tie(code, out) = RunTool("--help");
  EXPECT_EQ(code, 0);
  for (const char* flag : {"--params",      "--dp",          "--layers",
                           "--hidden",      "--heads",       "--vocab",
                           "--seq",         "--micro-batch", "--micro-batches",
                           "--precision",   "--optimizer",   "--state-dtype",
                           "--config",      "--devices",     "--device-memory",
                           "--host-memory", "--nvme",        "--devices-per-node",
                           "--tp",          "--pp",          "--stage",
                           "--recompute",   "--no-recommend", "--experts",
                           "--ep",          "--top-k",       "--capacity-factor"}) {
    EXPECT_NE(out.find(flag), std::string::npos) << flag;
  }
}

TEST(ZeroPlan, QuickFormPrintsThePaperBesideTheLayout) {
  auto [code, out] = RunTool("--params 7.5e9 --dp 64");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("120.0 GB"), std::string::npos) << out;
  EXPECT_NE(out.find("Why the layout differs"), std::string::npos) << out;
}

// A 1.3B GPT (24 layers, hidden 2048) with short sequences.
const GptShape kSmall{24, 2048, 16, 50257, 256, 1};

TEST(ZeroPlan, RecommendsStageZeroWhenEverythingFits) {
  ClusterSpec cluster;
  cluster.devices = 8;
  cluster.device_memory = 80e9;
  auto rec = Recommend(kSmall, MixedPrecision(), 1, cluster);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  ASSERT_TRUE(rec->found) << rec->why;
  EXPECT_EQ(rec->best.choice.stage, 0);
  EXPECT_EQ(rec->best.choice.offload, OffloadChoice::kNone);
  EXPECT_FALSE(rec->best.choice.recompute);
  EXPECT_EQ(rec->best.choice.grid.tp * rec->best.choice.grid.pp, 1);
  EXPECT_EQ(rec->candidates_planned, 1);
}

TEST(ZeroPlan, RecommendsTheLowestShardingStageThatFits) {
  // 16 bytes x 1.3B = 21 GB do not fit 12 GB; stage 1 over 8 ranks (2 + 2 + 12/8 bytes) does.
  ClusterSpec cluster;
  cluster.devices = 8;
  cluster.device_memory = 12e9;
  auto rec = Recommend(kSmall, MixedPrecision(), 1, cluster);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  ASSERT_TRUE(rec->found) << rec->why;
  EXPECT_GE(rec->best.choice.stage, 1);
  EXPECT_LE(rec->best.choice.stage, 2);
  EXPECT_EQ(rec->best.choice.offload, OffloadChoice::kNone);
  EXPECT_EQ(rec->best.choice.grid.tp * rec->best.choice.grid.pp, 1);
  EXPECT_NE(rec->why.find("stage 0 offload none"), std::string::npos) << rec->why;
}

TEST(ZeroPlan, RecommendsOffloadOnASingleSmallDevice) {
  // One 16 GB device: no sharding helps (dp 1), no model parallelism exists; moving the
  // optimizer states (12 bytes per parameter) to the host does.
  ClusterSpec cluster;
  cluster.devices = 1;
  cluster.devices_per_node = 1;
  cluster.device_memory = 16e9;
  auto rec = Recommend(kSmall, MixedPrecision(), 1, cluster);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  ASSERT_TRUE(rec->found) << rec->why;
  EXPECT_EQ(rec->best.choice.offload, OffloadChoice::kCpuOptimizer) << rec->why;
  EXPECT_GT(rec->best.host_bytes, int64_t(12 * 1.2e9));
}

TEST(ZeroPlan, SaysWhenNothingFits) {
  ClusterSpec cluster;
  cluster.devices = 1;
  cluster.devices_per_node = 1;
  cluster.device_memory = 1e9;
  cluster.host_memory = 8e9;
  auto rec = Recommend(kSmall, MixedPrecision(), 1, cluster);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_FALSE(rec->found);
  EXPECT_NE(rec->why.find("nothing fits"), std::string::npos) << rec->why;
}


// A 1.3B GPT's shape with 8 experts per block (top-2).
GptShape SmallMoe() {
  GptShape s = kSmall;
  s.experts = 8;
  return s;
}

TEST(ZeroPlan, ExpertParameterCountIsTheModels) {
  // One rank of ep 1 holds every unit of the model: its units are the full model's.
  for (int experts : {0, 8}) {
    GptShape s{4, 64, 4, 67, 16, 2};
    s.experts = experts;
    auto stages = GptStages(s, GridShape{1, 1, 1}, false, 1);
    ASSERT_TRUE(stages.ok()) << stages.status().ToString();
    int64_t numel = 0, expert_numel = 0;
    int expert_units = 0;
    for (const PlanUnit& u : (*stages)[0].units) {
      numel += u.numel();
      if (u.expert) expert_numel += u.numel(), ++expert_units;
    }
    EXPECT_EQ(numel, GptParameterCount(s)) << experts << " experts";
    EXPECT_EQ(expert_numel, GptExpertParameterCount(s)) << experts << " experts";
    EXPECT_EQ(expert_units, experts > 0 ? s.layers : 0);
  }
}

TEST(ZeroPlan, ExpertsAreShardedOverTheExpertDataParallelGroup) {
  // dp 8, ep 4: a rank holds the router and 2 of the 8 experts per block, sharded over
  // edp = 2 ranks; the rest over dp = 8.
  const GptShape s = SmallMoe();
  ClusterSpec cluster;
  cluster.devices = 8;
  cluster.device_memory = 1e12;
  const double h = double(s.hidden);
  const double expert_rank =
      double(s.layers) * (double(s.experts) * h + double(s.experts / 4) * (8 * h * h + 5 * h));
  const double dense = double(GptParameterCount(s) - GptExpertParameterCount(s));
  for (int stage : {0, 1, 3}) {
    SCOPED_TRACE(stage);
    PlanChoice c{GridShape{1, 1, 8}, stage, OffloadChoice::kNone, false, 500'000'000};
    c.grid.ep = 4;
    auto row = PlanGpt(s, MixedPrecision(), c, 1, cluster);
    ASSERT_TRUE(row.ok()) << row.status().ToString();
    EXPECT_EQ(double(row->worst.expert_numel), expert_rank);
    EXPECT_EQ(double(row->worst.numel), dense + expert_rank);
    // bf16 parameters (2 bytes), sharded at stage 3; the fp32 master and two states (12
    // bytes) sharded from stage 1; padding adds well under 0.5% here.
    const double params = 2 * (stage == 3 ? dense / 8 + expert_rank / 2 : dense + expert_rank);
    const double states = 12 * (stage >= 1 ? dense / 8 + expert_rank / 2 : dense + expert_rank);
    EXPECT_NEAR(double(row->worst.Peak(MemoryTier::kDevice, MemoryCategory::kParameters)), params,
                0.005 * params);
    EXPECT_NEAR(double(row->worst.Peak(MemoryTier::kDevice, MemoryCategory::kOptimizerStates)),
                states, 0.005 * states);
  }
}

TEST(ZeroPlan, BadExpertSettingsNameTheValue) {
  GptShape s = SmallMoe();
  s.experts = 6;
  GridShape g{1, 1, 4};
  g.ep = 4;
  auto bad = GptStages(s, g, false, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--experts 6 is not divisible by --ep 4"),
            std::string::npos)
      << bad.status().message();
  s.experts = 6;
  g.ep = 3;
  bad = GptStages(s, g, false, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--ep 3 does not divide --dp 4"), std::string::npos)
      << bad.status().message();
  s.experts = 0;
  g.ep = 2;
  bad = GptStages(s, g, false, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--ep 2 without --experts"), std::string::npos)
      << bad.status().message();
  s = SmallMoe();
  s.top_k = 3;
  bad = GptStages(s, GridShape{1, 1, 1}, false, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--top-k 3"), std::string::npos) << bad.status().message();
  s = SmallMoe();
  s.capacity_factor = 0;
  bad = GptStages(s, GridShape{1, 1, 1}, false, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--capacity-factor 0"), std::string::npos)
      << bad.status().message();
  s.capacity_factor = 1.25;
  s.experts = -1;
  bad = GptStages(s, GridShape{1, 1, 1}, false, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--experts -1"), std::string::npos)
      << bad.status().message();
}

TEST(ZeroPlan, CommandLinePlansExperts) {
  auto [code, out] = RunTool(
      "--layers 2 --hidden 64 --heads 4 --seq 64 --devices 4 --experts 8 --ep 2 --top-k 1 "
      "--capacity-factor 2 --no-recommend");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("8 experts per block"), std::string::npos) << out;
  EXPECT_NE(out.find("top-1, capacity factor 2, ep 2"), std::string::npos) << out;
  std::tie(code, out) = RunTool("--layers 2 --hidden 64 --heads 4 --devices 4 --experts 6 --ep 4");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--experts 6 is not divisible by --ep 4"), std::string::npos) << out;
  std::tie(code, out) = RunTool("--layers 2 --hidden 64 --heads 4 --devices 6 --experts 8 --ep 4");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--ep 4 does not divide --dp 6"), std::string::npos) << out;
  // The recommendation keeps ep and looks only at grids whose dp it divides.
  std::tie(code, out) =
      RunTool("--layers 2 --hidden 64 --heads 4 --seq 64 --devices 8 --experts 8 --ep 4");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("(ep 4)"), std::string::npos) << out;
}

}  // namespace
}  // namespace zs
