// The GPT of runtime/nn trained by the ZeroEngine, ranks as threads: stages 0-3 give
// bit-identical fp32 parameters (uneven vocabulary, hidden size and unit sizes, with and
// without accumulation and clipping); a 3-rank run matches a 1-rank run of the same global
// batch; bf16 tracks fp32.
#include <gtest/gtest.h>

#include <mutex>

#include "runtime/base/splitmix64.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/engine/zero_engine.h"
#include "runtime/nn/gpt.h"

namespace zs {
namespace {

constexpr int kVocab = 37, kSeq = 7;

// A learnable stream: token t+1 = (3 * token t + noise) mod V, sequence g of step s.
void FillTokens(int step, uint64_t g, std::span<int32_t> in, std::span<int32_t> out) {
  int32_t t = int32_t(SplitMix64(uint64_t(step) * 1000003 + g) % kVocab);
  for (int i = 0; i < kSeq; ++i) {
    in[i] = t;
    t = int32_t((3 * t + int(SplitMix64(g * 31 + i + uint64_t(step) * 7) % 3)) % kVocab);
    out[i] = t;
  }
}

struct Result {
  uint64_t digest = 0;
  std::vector<double> losses;
  std::vector<std::vector<float>> params;
};

enum class Precision { kF32, kBF16, kF16 };

StatusOr<Result> Train(int world, int stage, int batch, int ga, double clip, Precision precision,
                       int steps) {
  Result result;
  std::mutex mu;
  CommOptions options;
  Status status = RunLocalRanks(
      world, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        nn::GptConfig gc{kVocab, kSeq, 2, 18, 3};  // hidden 18: no world size of 4+ divides it
        ZS_ASSIGN_OR_RETURN(auto gpt, nn::Gpt::Create(gc, &tracker));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        EngineConfig config;
        config.zero_optimization.stage = stage;
        config.zero_optimization.reduce_bucket_size = 500;
        config.zero_optimization.overlap_comm = true;
        config.zero_optimization.stage3_max_live_parameters = 4000;
        config.zero_optimization.stage3_prefetch_bucket_size = 3000;
        config.zero_optimization.stage3_param_persistence_threshold = 50;  // the head stays whole
        config.gradient_accumulation_steps = ga;
        config.gradient_clipping = clip;
        config.optimizer.lr = 3e-3;
        config.bf16.enabled = precision == Precision::kBF16;
        config.fp16.enabled = precision == Precision::kF16;
        ZS_ASSIGN_OR_RETURN(auto engine,
                            ZeroEngine::Create(config, gpt->spec(), gpt->Init(11), *device, comm));
        std::vector<int32_t> in(size_t(batch) * kSeq), out(in.size());
        for (int step = 0; step < steps; ++step) {
          double loss = 0;
          for (int m = 0; m < ga; ++m) {
            for (int b = 0; b < batch; ++b) {
              const uint64_t g = uint64_t((m * world + rank) * batch + b);
              FillTokens(step, g, std::span(in).subspan(size_t(b) * kSeq, kSeq),
                         std::span(out).subspan(size_t(b) * kSeq, kSeq));
            }
            ZS_ASSIGN_OR_RETURN(float l, gpt->ForwardBackward(*engine, in, out, batch, kSeq));
            loss += l / ga;
          }
          ZS_RETURN_IF_ERROR(engine->Step().status());
          ZS_ASSIGN_OR_RETURN(double mean, engine->AllReduceMean(loss));
          if (rank == 0) result.losses.push_back(mean);
        }
        ZS_ASSIGN_OR_RETURN(uint64_t digest, engine->MasterDigest());
        std::vector<std::vector<float>> params;
        for (int u = 0; u < int(gpt->spec().units.size()); ++u) {
          for (int p = 0; p < int(gpt->spec().units[u].params.size()); ++p) {
            ZS_ASSIGN_OR_RETURN(auto v, engine->GatherMasterParam(u, p));
            params.push_back(std::move(v));
          }
        }
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0) {
          result.digest = digest;
          result.params = std::move(params);
        }
        return OkStatus();
      });
  if (!status.ok()) return status;
  return result;
}

TEST(GptParity, StagesAreBitIdentical) {
  struct Case {
    int world, ga;
    double clip;
  };
  for (Case c : {Case{3, 1, 0.0}, Case{3, 2, 0.5}, Case{4, 1, 0.3}}) {
    std::vector<uint64_t> digests;
    for (int stage = 0; stage <= 3; ++stage) {
      auto r = Train(c.world, stage, 2, c.ga, c.clip, Precision::kF32, 3);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      digests.push_back(r->digest);
    }
    for (int stage = 1; stage <= 3; ++stage) {
      EXPECT_EQ(digests[stage], digests[0])
          << "stage " << stage << " world " << c.world << " ga " << c.ga << " clip " << c.clip;
    }
  }
}

TEST(GptParity, ThreeRanksMatchOneRankOfTheSameGlobalBatch) {
  auto one = Train(1, 0, 6, 1, 0.0, Precision::kF32, 3);
  auto three = Train(3, 3, 1, 2, 0.0, Precision::kF32, 3);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  for (size_t k = 0; k < one->losses.size(); ++k) {
    EXPECT_NEAR(three->losses[k], one->losses[k], 1e-5 * one->losses[k]);
  }
  for (size_t p = 0; p < one->params.size(); ++p) {
    for (size_t i = 0; i < one->params[p].size(); ++i) {
      ASSERT_NEAR(three->params[p][i], one->params[p][i], 1e-5) << "param " << p << " elem " << i;
    }
  }
}

TEST(GptParity, Bf16AndFp16TrackFp32AndTheLossFalls) {
  auto fp32 = Train(2, 3, 4, 1, 1.0, Precision::kF32, 60);
  ASSERT_TRUE(fp32.ok()) << fp32.status().ToString();
  for (Precision p : {Precision::kBF16, Precision::kF16}) {
    auto low = Train(2, 3, 4, 1, 1.0, p, 60);
    ASSERT_TRUE(low.ok()) << low.status().ToString();
    for (size_t k = 0; k < fp32->losses.size(); ++k) {
      EXPECT_NEAR(low->losses[k], fp32->losses[k], 0.03 * fp32->losses[k])
          << (p == Precision::kBF16 ? "bf16" : "fp16") << " step " << k;
    }
  }
  double first = 0, last = 0;
  for (int k = 0; k < 5; ++k) first += fp32->losses[k], last += fp32->losses[59 - k];
  EXPECT_LT(last, 0.8 * first);
}

}  // namespace
}  // namespace zs
