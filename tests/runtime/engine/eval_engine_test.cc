// Evaluation through the ZeroEngine ([Note: evaluation] in zero_engine.h), with the GPT of
// runtime/nn on ranks as threads: forward-only passes between steps leave training bit-identical
// at every stage and world size (1, 2, 4), stage 3's training trace and its counters are the
// same as without evaluation, the held-out loss is the same at every stage, and misuse is
// refused with FailedPrecondition.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <mutex>

#include "runtime/base/splitmix64.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/engine/zero_engine.h"
#include "runtime/nn/gpt.h"

namespace zs {
namespace {

constexpr int kVocab = 37, kSeq = 7, kBatch = 2;

// Sequence g of step s (held-out sequences use steps from 1000 on).
void FillTokens(int step, uint64_t g, std::span<int32_t> in, std::span<int32_t> out) {
  int32_t t = int32_t(SplitMix64(uint64_t(step) * 1000003 + g) % kVocab);
  for (int i = 0; i < kSeq; ++i) {
    in[i] = t;
    t = int32_t((3 * t + int(SplitMix64(g * 31 + i + uint64_t(step) * 7) % 3)) % kVocab);
    out[i] = t;
  }
}

void FillBatch(int step, int micro, int rank, int world, std::vector<int32_t>& in,
               std::vector<int32_t>& out) {
  for (int b = 0; b < kBatch; ++b) {
    const uint64_t g = uint64_t((micro * world + rank) * kBatch + b);
    FillTokens(step, g, std::span(in).subspan(size_t(b) * kSeq, kSeq),
               std::span(out).subspan(size_t(b) * kSeq, kSeq));
  }
}

EngineConfig Config(int stage, int ga, bool bf16) {
  EngineConfig config;
  config.zero_optimization.stage = stage;
  config.zero_optimization.reduce_bucket_size = 500;
  config.zero_optimization.overlap_comm = true;
  // A block is 4122 elements: the next block or two can be prefetched.
  config.zero_optimization.stage3_max_live_parameters = 13000;
  config.zero_optimization.stage3_prefetch_bucket_size = 9000;
  config.zero_optimization.stage3_param_persistence_threshold = 50;  // the head stays whole
  config.gradient_accumulation_steps = ga;
  config.gradient_clipping = 0.5;
  config.optimizer.lr = 3e-3;
  config.bf16.enabled = bf16;
  return config;
}

struct Result {
  uint64_t digest = 0;
  std::vector<double> losses;       // training, global mean per step
  std::vector<double> eval_losses;  // global mean per evaluation
  GatherReport gather;              // rank 0's
};

// Trains `steps` steps; with `eval_batches` > 0, evaluates that many held-out batches before the
// first step and after every step.
StatusOr<Result> TrainWithEval(int world, int stage, int ga, int steps, int eval_batches,
                               bool bf16 = false) {
  Result result;
  std::mutex mu;
  CommOptions options;
  Status status = RunLocalRanks(
      world, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        nn::GptConfig gc{kVocab, kSeq, 2, 18, 3};
        ZS_ASSIGN_OR_RETURN(auto gpt, nn::Gpt::Create(gc, &tracker));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        ZS_ASSIGN_OR_RETURN(auto engine, ZeroEngine::Create(Config(stage, ga, bf16), gpt->spec(),
                                                            gpt->Init(11), *device, comm));
        std::vector<int32_t> in(size_t(kBatch) * kSeq), out(in.size());
        std::vector<double> losses, eval_losses;
        auto evaluate = [&]() -> Status {
          if (eval_batches == 0) return OkStatus();
          ZS_RETURN_IF_ERROR(engine->BeginEvaluation());
          double loss = 0;
          for (int k = 0; k < eval_batches; ++k) {
            FillBatch(1000 + k, 0, rank, world, in, out);
            ZS_ASSIGN_OR_RETURN(float l, gpt->Forward(*engine, in, out, kBatch, kSeq));
            loss += double(l) / eval_batches;
          }
          ZS_RETURN_IF_ERROR(engine->EndEvaluation());
          ZS_ASSIGN_OR_RETURN(double mean, engine->AllReduceMean(loss));
          eval_losses.push_back(mean);
          return OkStatus();
        };
        ZS_RETURN_IF_ERROR(evaluate());
        for (int step = 0; step < steps; ++step) {
          double loss = 0;
          for (int m = 0; m < ga; ++m) {
            FillBatch(step, m, rank, world, in, out);
            ZS_ASSIGN_OR_RETURN(float l, gpt->ForwardBackward(*engine, in, out, kBatch, kSeq));
            loss += double(l) / ga;
          }
          ZS_RETURN_IF_ERROR(engine->Step().status());
          ZS_ASSIGN_OR_RETURN(double mean, engine->AllReduceMean(loss));
          losses.push_back(mean);
          ZS_RETURN_IF_ERROR(evaluate());
        }
        ZS_ASSIGN_OR_RETURN(uint64_t digest, engine->MasterDigest());
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0) {
          result.digest = digest;
          result.losses = losses;
          result.eval_losses = eval_losses;
          result.gather = engine->gather_report();
        }
        return OkStatus();
      });
  if (!status.ok()) return status;
  return result;
}

TEST(EvalEngine, EvaluationLeavesTrainingBitIdenticalAtEveryStageAndWorld) {
  for (int world : {1, 2, 4}) {
    const int ga = world == 2 ? 2 : 1;
    uint64_t stage0_digest = 0;
    std::vector<double> stage0_eval;
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(::testing::Message() << "world " << world << " stage " << stage);
      auto plain = TrainWithEval(world, stage, ga, 3, 0);
      auto with_eval = TrainWithEval(world, stage, ga, 3, 2);
      ASSERT_TRUE(plain.ok()) << plain.status().ToString();
      ASSERT_TRUE(with_eval.ok()) << with_eval.status().ToString();
      EXPECT_EQ(with_eval->digest, plain->digest);
      EXPECT_EQ(with_eval->losses, plain->losses);
      ASSERT_EQ(with_eval->eval_losses.size(), 4u);
      // The training trace and its counters do not see the evaluation passes.
      const GatherReport& p = plain->gather;
      const GatherReport& e = with_eval->gather;
      EXPECT_EQ(e.gathers, p.gathers);
      EXPECT_EQ(e.prefetch_hits, p.prefetch_hits);
      EXPECT_EQ(e.demand_gathers, p.demand_gathers);
      EXPECT_EQ(e.reuse_hits, p.reuse_hits);
      EXPECT_EQ(e.trace_invalidations, p.trace_invalidations);
      EXPECT_EQ(e.eval_passes, 4);
      EXPECT_EQ(p.eval_passes, 0);
      if (stage == 3) {
        EXPECT_GT(e.eval_gathers, 0);
        // The first pass records the evaluation trace; the next three replay it.
        EXPECT_GT(e.eval_prefetch_hits, 0);
        EXPECT_EQ(e.eval_trace_invalidations, 0);
        EXPECT_GT(p.prefetch_hits, 0);
      } else {
        EXPECT_EQ(e.eval_gathers, 0);
      }
      // Stages stay bit-identical, and so does the held-out loss.
      if (stage == 0) {
        stage0_digest = plain->digest;
        stage0_eval = with_eval->eval_losses;
      } else {
        EXPECT_EQ(plain->digest, stage0_digest);
        EXPECT_EQ(with_eval->eval_losses, stage0_eval);
      }
    }
  }
}

TEST(EvalEngine, HeldOutLossFallsWithTrainingAndBf16Runs) {
  auto fp32 = TrainWithEval(2, 3, 1, 30, 2);
  ASSERT_TRUE(fp32.ok()) << fp32.status().ToString();
  EXPECT_LT(fp32->eval_losses.back(), fp32->eval_losses.front());
  auto bf16_plain = TrainWithEval(2, 3, 1, 3, 0, /*bf16=*/true);
  auto bf16 = TrainWithEval(2, 3, 1, 3, 2, /*bf16=*/true);
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  ASSERT_TRUE(bf16_plain.ok()) << bf16_plain.status().ToString();
  EXPECT_EQ(bf16->digest, bf16_plain->digest);
  EXPECT_NEAR(bf16->eval_losses[0], fp32->eval_losses[0], 0.05);
}

// An evaluation of the batch a step then trains on gives the loss that step's forward gives.
TEST(EvalEngine, EvaluationLossEqualsTheTrainingForwardLoss) {
  for (int stage : {0, 3}) {
    CommOptions options;
    Status status = RunLocalRanks(
        2, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
          nn::GptConfig gc{kVocab, kSeq, 2, 18, 3};
          ZS_ASSIGN_OR_RETURN(auto gpt, nn::Gpt::Create(gc, &tracker));
          ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
          ZS_ASSIGN_OR_RETURN(auto engine, ZeroEngine::Create(Config(stage, 1, false), gpt->spec(),
                                                              gpt->Init(5), *device, comm));
          std::vector<int32_t> in(size_t(kBatch) * kSeq), out(in.size());
          for (int step = 0; step < 2; ++step) {
            FillBatch(step, 0, rank, 2, in, out);
            ZS_RETURN_IF_ERROR(engine->BeginEvaluation());
            ZS_ASSIGN_OR_RETURN(float eval, gpt->Forward(*engine, in, out, kBatch, kSeq));
            ZS_RETURN_IF_ERROR(engine->EndEvaluation());
            ZS_ASSIGN_OR_RETURN(float train, gpt->ForwardBackward(*engine, in, out, kBatch, kSeq));
            if (eval != train) {
              return InternalError(fmt::format("stage {} step {} rank {}: eval loss {} != {}",
                                               stage, step, rank, eval, train));
            }
            ZS_RETURN_IF_ERROR(engine->Step().status());
          }
          return OkStatus();
        });
    EXPECT_TRUE(status.ok()) << status.ToString();
  }
}

TEST(EvalEngine, MisuseIsRefusedAndChangesNothing) {
  for (int stage : {1, 3}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    CommOptions options;
    Status status = RunLocalRanks(
        2, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
          nn::GptConfig gc{kVocab, kSeq, 2, 18, 3};
          ZS_ASSIGN_OR_RETURN(auto gpt, nn::Gpt::Create(gc, &tracker));
          ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
          ZS_ASSIGN_OR_RETURN(auto engine, ZeroEngine::Create(Config(stage, 2, false), gpt->spec(),
                                                              gpt->Init(5), *device, comm));
          std::vector<int32_t> in(size_t(kBatch) * kSeq), out(in.size());
          auto expect = [&](Status s, std::string_view what, std::string_view needle) -> Status {
            if (s.code() != StatusCode::kFailedPrecondition ||
                s.message().find(needle) == std::string::npos) {
              return InternalError(fmt::format("rank {}: {}: got {}", rank, what, s.ToString()));
            }
            return OkStatus();
          };
          ZS_RETURN_IF_ERROR(
              expect(engine->EndEvaluation(), "EndEvaluation first", "without BeginEvaluation"));
          // One of two micro-batches done: mid-window.
          FillBatch(0, 0, rank, 2, in, out);
          ZS_RETURN_IF_ERROR(gpt->ForwardBackward(*engine, in, out, kBatch, kSeq).status());
          ZS_RETURN_IF_ERROR(
              expect(engine->BeginEvaluation(), "mid-window", "between optimizer steps"));
          if (engine->evaluating()) return InternalError("evaluating after a refused Begin");
          FillBatch(0, 1, rank, 2, in, out);
          ZS_RETURN_IF_ERROR(gpt->ForwardBackward(*engine, in, out, kBatch, kSeq).status());
          ZS_RETURN_IF_ERROR(engine->Step().status());
          ZS_RETURN_IF_ERROR(engine->BeginEvaluation());
          ZS_RETURN_IF_ERROR(expect(engine->BeginEvaluation(), "twice", "under way"));
          ZS_RETURN_IF_ERROR(expect(engine->Step().status(), "Step", "during an evaluation"));
          // A bracket left open (a model that failed mid-forward).
          ZS_RETURN_IF_ERROR(engine->BeginForward(0));
          ZS_RETURN_IF_ERROR(expect(engine->EndEvaluation(), "open bracket", "'embed'"));
          ZS_RETURN_IF_ERROR(engine->EndForward(0));
          ZS_RETURN_IF_ERROR(engine->EndEvaluation());
          // Training goes on.
          for (int m = 0; m < 2; ++m) {
            FillBatch(1, m, rank, 2, in, out);
            ZS_RETURN_IF_ERROR(gpt->ForwardBackward(*engine, in, out, kBatch, kSeq).status());
          }
          return engine->Step().status();
        });
    EXPECT_TRUE(status.ok()) << status.ToString();
  }
}

}  // namespace
}  // namespace zs
