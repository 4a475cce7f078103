// LayerDrop (nn::GptConfig::layer_drop) through the ZeroEngine with
// zerostack.allow_unused_units ([Note: unused units] in zero_engine.h), 2 ranks as threads:
// - stages 0-3 give bit-identical parameters while the ranks drop different blocks;
// - they match a one-rank run that plays both ranks' micro-batches (with their drop decisions)
//   as two accumulated micro-batches. The tolerance is zero, and that is exact, not lucky:
//   backward_scale is 1/2 in both runs, so every rank's (or micro-batch's) gradient has the
//   same bits; the 2-rank run adds the two in one reduction, the one-rank run adds the second
//   micro-batch's to the first's in its gradient buffer: one fp32 addition per element either
//   way (a dropped block adds its zeros alike); without clipping the norm, whose partial sums
//   differ, changes nothing; the optimizer is elementwise. The mean losses are the same two
//   per-micro-batch losses averaged alike.
// - evaluation never drops; a bad probability, an engine without allow_unused_units and, at
//   stage 3, blocks that are not persistent (ranks drop different blocks: their gathers would
//   not match) are errors naming the value and the key.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <mutex>
#include <set>

#include "runtime/base/splitmix64.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/engine/zero_engine.h"
#include "runtime/nn/gpt.h"

namespace zs {
namespace {

constexpr int kVocab = 23, kSeq = 6, kBatch = 2, kLayers = 4, kSteps = 4;
constexpr double kDrop = 0.3;

nn::GptConfig DropConfig(double drop = kDrop) {
  nn::GptConfig c{kVocab, kSeq, kLayers, 12, 2};
  c.layer_drop = drop;
  c.layer_drop_seed = 5;
  return c;
}

// Sequence g of step s: t+1 = (2 t + noise) mod V.
void FillTokens(int step, uint64_t g, std::span<int32_t> in, std::span<int32_t> out) {
  int32_t t = int32_t(SplitMix64(uint64_t(step) * 7919 + g) % kVocab);
  for (int i = 0; i < kSeq; ++i) {
    in[size_t(i)] = t;
    t = int32_t((2 * t + int(SplitMix64(g * 17 + uint64_t(i) + uint64_t(step) * 3) % 2)) % kVocab);
    out[size_t(i)] = t;
  }
}

struct DropRun {
  int world = 2;
  int stage = 0;
  bool allow_unused = true;
  double drop = kDrop;
  // Stage 3: ranks drop different blocks, so each block must stay gathered ([Note: unused
  // units]): the threshold is a block's size. -1: a block's parameters.
  int64_t persistence_threshold = -1;
};

struct DropResult {
  uint64_t digest = 0;
  std::vector<double> losses;  // the global mean per step
  Status error;                // rank 0's first error
};

// world 2: micro-batch 0 of rank r is sample r. world 1: micro-batch m replays sample m with
// the drop key of (rank m, micro-batch 0).
DropResult TrainDrop(const DropRun& run) {
  DropResult result;
  std::mutex mu;
  CommOptions options;
  options.timeout = std::chrono::milliseconds(20'000);
  const int ga = run.world == 2 ? 1 : 2;
  Status status = RunLocalRanks(
      run.world, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto gpt, nn::Gpt::Create(DropConfig(run.drop), &tracker));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        EngineConfig config;
        config.zero_optimization.stage = run.stage;
        config.zero_optimization.reduce_bucket_size = 300;
        config.zero_optimization.stage3_param_persistence_threshold =
            run.persistence_threshold >= 0 ? run.persistence_threshold
                                           : gpt->spec().units[1].numel();
        config.gradient_accumulation_steps = ga;
        config.optimizer.lr = 3e-3;
        config.optimizer.weight_decay = 0.01;
        config.zerostack.allow_unused_units = run.allow_unused;
        ZS_ASSIGN_OR_RETURN(auto engine,
                            ZeroEngine::Create(config, gpt->spec(), gpt->Init(3), *device, comm));
        std::vector<int32_t> in(size_t(kBatch) * kSeq), out(in.size());
        for (int step = 0; step < kSteps; ++step) {
          double loss = 0;
          for (int m = 0; m < ga; ++m) {
            const int sample = run.world == 2 ? rank : m;
            for (int b = 0; b < kBatch; ++b) {
              FillTokens(step, uint64_t(sample * kBatch + b),
                         std::span(in).subspan(size_t(b) * kSeq, kSeq),
                         std::span(out).subspan(size_t(b) * kSeq, kSeq));
            }
            const nn::LayerDropKey key{step, 0, sample};
            auto l = gpt->ForwardBackward(*engine, in, out, kBatch, kSeq, key);
            if (!l.ok()) {
              std::lock_guard<std::mutex> lock(mu);
              if (rank == 0) result.error = l.status();
              return OkStatus();
            }
            loss += double(*l);
          }
          ZS_RETURN_IF_ERROR(engine->Step().status());
          ZS_ASSIGN_OR_RETURN(double sum, engine->AllReduceMean(loss));
          if (rank == 0) result.losses.push_back(sum * run.world / 2);
        }
        // Evaluation never drops: the held-out loss is that of the whole model.
        ZS_RETURN_IF_ERROR(engine->BeginEvaluation());
        ZS_RETURN_IF_ERROR(gpt->Forward(*engine, in, out, kBatch, kSeq).status());
        ZS_RETURN_IF_ERROR(engine->EndEvaluation());
        ZS_ASSIGN_OR_RETURN(uint64_t digest, engine->MasterDigest());
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0) result.digest = digest;
        return OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status.ToString();
  return result;
}

TEST(LayerDrop, DecisionsAreDeterministicAndDropAboutP) {
  auto gpt = nn::Gpt::Create(DropConfig()).value();
  int dropped = 0, total = 0;
  for (int step = 0; step < 200; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      for (int l = 0; l < kLayers; ++l) {
        const nn::LayerDropKey key{step, 1, rank};
        EXPECT_EQ(gpt->DropsBlock(key, l), gpt->DropsBlock(key, l));
        dropped += gpt->DropsBlock(key, l);
        ++total;
      }
    }
  }
  // 1600 Bernoulli(0.3) draws: mean 480, standard deviation 18.3; 5 sigma either side.
  EXPECT_NEAR(dropped, kDrop * total, 5 * std::sqrt(kDrop * (1 - kDrop) * total));
  nn::GptConfig none = DropConfig();
  none.layer_drop = 0;
  auto plain = nn::Gpt::Create(none).value();
  for (int l = 0; l < kLayers; ++l) EXPECT_FALSE(plain->DropsBlock({0, 0, 0}, l));
}

TEST(LayerDrop, StagesAreBitIdenticalAndMatchOneRankReplayingBothRanks) {
  // The test must see ranks disagree and whole blocks dropped in the steps it runs.
  auto gpt = nn::Gpt::Create(DropConfig()).value();
  int disagreements = 0, drops = 0;
  for (int step = 0; step < kSteps; ++step) {
    for (int l = 0; l < kLayers; ++l) {
      disagreements += gpt->DropsBlock({step, 0, 0}, l) != gpt->DropsBlock({step, 0, 1}, l);
      drops += gpt->DropsBlock({step, 0, 0}, l) + gpt->DropsBlock({step, 0, 1}, l);
    }
  }
  ASSERT_GT(disagreements, 0);
  ASSERT_GT(drops, 0);

  DropRun one;
  one.world = 1;
  const DropResult want = TrainDrop(one);
  ASSERT_TRUE(want.error.ok()) << want.error.ToString();
  ASSERT_NE(want.digest, 0u);
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(fmt::format("stage {}", stage));
    DropRun run;
    run.stage = stage;
    const DropResult got = TrainDrop(run);
    ASSERT_TRUE(got.error.ok()) << got.error.ToString();
    EXPECT_EQ(got.digest, want.digest);
    EXPECT_EQ(got.losses, want.losses);
  }
  EXPECT_LT(want.losses.back(), want.losses.front()) << "it learns";
  one.drop = 0;  // the drops change the run
  const DropResult all_blocks = TrainDrop(one);
  ASSERT_TRUE(all_blocks.error.ok()) << all_blocks.error.ToString();
  EXPECT_NE(all_blocks.digest, want.digest);
  EXPECT_NE(all_blocks.losses, want.losses);
}

TEST(LayerDrop, AnEngineWithoutAllowUnusedUnitsIsAnErrorNamingTheKey) {
  DropRun run;
  run.stage = 2;
  run.allow_unused = false;
  const DropResult got = TrainDrop(run);
  EXPECT_EQ(got.error.code(), StatusCode::kFailedPrecondition);
  const std::string message(got.error.message());
  EXPECT_NE(message.find("layer_drop 0.3"), std::string::npos) << message;
  EXPECT_NE(message.find("zerostack.allow_unused_units"), std::string::npos) << message;
}

TEST(LayerDrop, AtStage3BlocksThatAreNotPersistentAreAnErrorNamingTheKey) {
  DropRun run;
  run.stage = 3;
  run.persistence_threshold = 30;  // below a block's size: blocks are gathered per use
  const DropResult got = TrainDrop(run);
  EXPECT_EQ(got.error.code(), StatusCode::kFailedPrecondition);
  const std::string message(got.error.message());
  EXPECT_NE(message.find("unit 'block.0'"), std::string::npos) << message;
  EXPECT_NE(message.find("stage3_param_persistence_threshold"), std::string::npos) << message;
}

TEST(LayerDrop, AProbabilityOutsideZeroToOneIsAnErrorNamingIt) {
  for (double p : {-0.1, 1.0, 1.5, std::nan("")}) {
    nn::GptConfig c = DropConfig();
    c.layer_drop = p;
    auto gpt = nn::Gpt::Create(c);
    EXPECT_EQ(gpt.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(gpt.status().message().find(fmt::format("layer_drop {}", p)), std::string::npos)
        << gpt.status().ToString();
  }
}

}  // namespace
}  // namespace zs
