// The plan agrees with the tracker: the nn GPT trained for two steps on the ZeroEngine (ranks as
// threads, world 2 and 4, every stage, with and without offload_optimizer cpu, fp32 and bf16,
// and with the embedding and the first block frozen) peaks at the bytes PlanRankMemory says,
// per tier and category, within 3%.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/engine/zero_engine.h"
#include "runtime/nn/gpt.h"
#include "runtime/plan/gpt_plan_model.h"
#include "runtime/plan/rank_memory_plan.h"

namespace zs {
namespace {

constexpr int64_t kBatch = 2, kSeq = 16;
const nn::GptConfig kGpt{/*vocab=*/67, /*max_seq=*/kSeq, /*layers=*/3, /*hidden=*/40,
                         /*heads=*/4};

EngineConfig Config(int stage, bool offload, bool bf16) {
  EngineConfig c;
  c.zero_optimization.stage = stage;
  c.zero_optimization.reduce_bucket_size = 3000;
  c.zero_optimization.overlap_comm = true;
  c.zero_optimization.stage3_max_live_parameters = 60000;
  c.zero_optimization.stage3_prefetch_bucket_size = 25000;
  c.zero_optimization.stage3_param_persistence_threshold = 100;  // the head stays whole
  if (offload) {
    c.zero_optimization.offload_optimizer.device = OffloadDevice::kCpu;
    c.zero_optimization.sub_group_size = 65536;
  }
  c.bf16.enabled = bf16;
  return c;
}

// The units frozen ([Note: frozen units], zero_engine.h): none, or the embedding and block.0.
std::vector<int> FrozenUnits(bool frozen) { return frozen ? std::vector<int>{0, 1} : std::vector<int>{}; }

StatusOr<MemorySnapshot> Measure(int world, const EngineConfig& config, bool frozen = false) {
  std::vector<MemorySnapshot> snapshots;
  std::mutex mu;
  MemorySnapshot rank0;
  Status status = RunLocalRanks(
      world, CommOptions{}, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto gpt, nn::Gpt::Create(kGpt, &tracker));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        {
          ModelSpec spec = gpt->spec();
          for (int u : FrozenUnits(frozen)) {
            for (ParamSpec& p : spec.units[size_t(u)].params) p.trainable = false;
          }
          ZS_ASSIGN_OR_RETURN(auto engine, ZeroEngine::Create(config, std::move(spec),
                                                              gpt->Init(3), *device, comm));
          std::vector<int32_t> in(kBatch * kSeq), out(in.size());
          for (size_t i = 0; i < in.size(); ++i) {
            in[i] = int32_t((i * 7 + size_t(rank)) % kGpt.vocab);
            out[i] = int32_t((i * 5 + 1) % kGpt.vocab);
          }
          for (int step = 0; step < 2; ++step) {
            ZS_RETURN_IF_ERROR(gpt->ForwardBackward(*engine, in, out, kBatch, kSeq).status());
            ZS_RETURN_IF_ERROR(engine->Step().status());
          }
        }
        if (rank == 0) {
          std::lock_guard<std::mutex> lock(mu);
          rank0 = tracker.Snapshot();
        }
        return OkStatus();
      });
  if (!status.ok()) return status;
  return rank0;
}

StatusOr<RankPlan> Plan(int world, const EngineConfig& config, bool frozen = false) {
  ZS_ASSIGN_OR_RETURN(auto gpt, nn::Gpt::Create(kGpt));
  ZS_ASSIGN_OR_RETURN(
      std::vector<StageModel> stages,
      GptStages(GptShape{kGpt.layers, kGpt.hidden, kGpt.heads, kGpt.vocab, kSeq, kBatch},
                GridShape{1, 1, world}, false, 1));
  RankPlanInput in;
  in.config = config;
  for (const UnitSpec& u : gpt->spec().units) {
    PlanUnit pu{u.name, {}};
    for (const ParamSpec& p : u.params) pu.param_sizes.push_back(p.numel());
    in.units.push_back(std::move(pu));
  }
  for (int u : FrozenUnits(frozen)) in.units[size_t(u)].frozen = true;
  in.order = stages[0].order;  // nn::Gpt's bracket order (GptChunk's at tp = pp = 1)
  in.dp = world;
  in.model_activation_bytes = NnGptActivationBytes(kGpt, kBatch, kSeq);
  in.activation_tier = MemoryTier::kHost;  // nn::Gpt counts its activations as host memory
  in.device_kind = DeviceKind::kCpu;
  return PlanRankMemory(in);
}

TEST(PlanTracker, ActivationsAreWhatNnGptHolds) {
  auto gpt = nn::Gpt::Create(kGpt);
  ASSERT_TRUE(gpt.ok());
  auto stages = GptStages(GptShape{kGpt.layers, kGpt.hidden, kGpt.heads, kGpt.vocab, kSeq, kBatch},
                          GridShape{1, 1, 1}, false, 1);
  ASSERT_TRUE(stages.ok()) << stages.status().ToString();
  auto m = Measure(1, Config(0, false, false));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->Peak(MemoryTier::kHost, MemoryCategory::kActivations),
            NnGptActivationBytes(kGpt, kBatch, kSeq));
}

TEST(PlanTracker, PeaksAgreeWithinThreePercent) {
  struct Case {
    int world, stage;
    bool offload, bf16;
    bool frozen = false;
  };
  std::vector<Case> cases;
  for (int world : {2, 4}) {
    for (int stage = 0; stage <= 3; ++stage) {
      cases.push_back({world, stage, false, world == 4});
      if (stage >= 1) cases.push_back({world, stage, true, world == 2});
    }
  }
  // Frozen units: parameters only (no gradient, optimizer tiles or bucket).
  cases.push_back({2, 1, false, false, true});
  cases.push_back({4, 3, false, true, true});
  cases.push_back({2, 2, true, true, true});
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "world " << c.world << " stage " << c.stage << " offload "
                                      << c.offload << " bf16 " << c.bf16 << " frozen "
                                      << c.frozen);
    const EngineConfig config = Config(c.stage, c.offload, c.bf16);
    auto measured = Measure(c.world, config, c.frozen);
    ASSERT_TRUE(measured.ok()) << measured.status().ToString();
    auto plan = Plan(c.world, config, c.frozen);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    int nonzero = 0;
    for (int t = 0; t < kNumMemoryTiers; ++t) {
      for (int k = 0; k < kNumMemoryCategories; ++k) {
        nonzero += measured->Peak(MemoryTier(t), MemoryCategory(k)) > 0 ? 1 : 0;
        const auto tier = MemoryTier(t);
        const auto cat = MemoryCategory(k);
        const double want = double(measured->Peak(tier, cat));
        const double got = double(plan->Peak(tier, cat));
        EXPECT_NEAR(got, want, 0.03 * want)
            << MemoryTierName(tier) << " / " << MemoryCategoryName(cat) << ": plan " << got
            << " bytes, tracker " << want;
      }
      EXPECT_NEAR(double(plan->TierPeak(MemoryTier(t))), double(measured->TierPeak(MemoryTier(t))),
                  0.03 * double(measured->TierPeak(MemoryTier(t))))
          << MemoryTierName(MemoryTier(t)) << " total";
    }
    // Parameters, gradients, optimizer states, comm buffers, activations at least.
    EXPECT_GE(nonzero, 5) << measured->ToTable();
    if (std::getenv("ZS_PLAN_TEST_VERBOSE") != nullptr) {
      std::printf("world %d stage %d offload %d bf16 %d\nmeasured:\n%s\nplanned:\n%s\n", c.world,
                  c.stage, int(c.offload), int(c.bf16), measured->ToTable().c_str(),
                  plan->memory.ToTable().c_str());
    }
  }
}

}  // namespace
}  // namespace zs
