// TpGpt against nn::Gpt: the spec (names, order, local shapes, tensor_parallel), Init slicing
// nn's values, the loss and every parameter's gradient gathered over tp at tp 1, 2 and 4 with
// and without sequence parallelism (including a padded vocabulary), a few SGD steps from
// Init(seed), the bracket order, the parts with micro-batches in flight and recompute,
// activation and tp scratch tracking, and the errors. The whole model runs as GptChunk's
// one-chunk case (WholeModelForwardBackward / WholeModelForward, gpt_chunk.h).
#include "runtime/parallel/gpt/tp_gpt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device/memory_tracker.h"
#include "runtime/model/dense_unit_access.h"
#include "runtime/nn/gpt.h"
#include "runtime/parallel/gpt/gpt_chunk.h"
#include "tests/runtime/parallel/tensor/tp_test_support.h"

namespace zs::parallel {
namespace {

using tp::TpBlockActivations;
using tp::TpParamLayout;
using tp::VocabShard;
using tp::testing::ExpectClose;
using tp::testing::ExpectInvalidArgument;
using tp::testing::RunTp;

// vocab 13 pads to 14 at tp 2 and 16 at tp 4; heads 4 split 4/2/1; rows 2 * 4 = 8.
nn::GptConfig Small() {
  return nn::GptConfig{.vocab = 13, .max_seq = 6, .layers = 2, .hidden = 16, .heads = 4};
}
constexpr int64_t kBatch = 2, kSeq = 4;

// Gathered gradients differ from nn::Gpt's in summation order only (partial GEMMs per rank,
// rank-order all-reduces, per-rank LayerNorm and bias sums under sequence parallelism, the
// cross-entropy's per-rank sums), compounded through two blocks. The worst measured difference
// is 8.5e-7 of a tensor's largest gradient (ZS_TP_TEST_ERRORS=1 prints them); 1e-5 leaves 10x
// for other BLAS kernels. The loss (a mean of log-sum-exps in double over float terms) agrees
// to 1e-6 relative.
constexpr double kGradRtol = 1e-5;
constexpr double kLossRtol = 1e-6;

struct Batch {
  std::vector<int32_t> tokens, targets;
};
Batch MakeBatch(int64_t vocab, int64_t batch, int64_t seq, uint32_t seed) {
  Batch b;
  uint32_t s = seed;
  auto next = [&] { return static_cast<int32_t>((s = s * 1664525u + 1013904223u) >> 8) % vocab; };
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<int32_t> row(seq + 1);
    for (int32_t& t : row) t = next();
    b.tokens.insert(b.tokens.end(), row.begin(), row.end() - 1);
    b.targets.insert(b.targets.end(), row.begin() + 1, row.end());
  }
  return b;
}

std::unique_ptr<nn::Gpt> MakeNn(const nn::GptConfig& config) {
  return std::move(nn::Gpt::Create(config)).value();
}

// Perturbed full parameters (not GPT-2's tiny init: biases and gains away from 0 and 1) so every
// gradient is well above float noise.
ParamInit LargeInit(const ModelSpec& full_spec) {
  return [full_spec](int unit, int param, std::span<float> values) {
    const ParamSpec& p = full_spec.units[unit].params[param];
    nn::FillNormal(99, unit, param, p.shape.size() == 2 ? 0.3f : 0.2f, values);
    if (p.name.ends_with("weight") && p.shape.size() == 1) {
      for (float& v : values) v += 1.0f;  // LayerNorm gains
    }
  };
}

// Per rank: the local gradients of every parameter, gathered into nn's full shapes.
struct Gathered {
  std::vector<float> losses;                       // [rank]
  std::vector<std::vector<std::vector<float>>> g;  // [unit][param] full gradient
};

void ExpectMatchesNn(const nn::GptConfig& config, int tp, bool sp, const ParamInit& full_init,
                     const Batch& b) {
  SCOPED_TRACE("tp " + std::to_string(tp) + (sp ? " sequence parallel" : ""));
  auto ref = MakeNn(config);
  DenseUnitAccess ref_access(ref->spec(), full_init);
  StatusOr<float> ref_loss = ref->ForwardBackward(ref_access, b.tokens, b.targets, kBatch, kSeq);
  ASSERT_TRUE(ref_loss.ok()) << ref_loss.status().ToString();

  const ModelSpec& full_spec = ref->spec();
  std::vector<float> losses(tp);
  std::vector<std::vector<std::vector<std::vector<float>>>> local(tp);  // [rank][unit][param]
  std::vector<std::unique_ptr<TpGpt>> models(tp);
  RunTp(tp, [&](int rank, Communicator& comm) -> Status {
    ZS_ASSIGN_OR_RETURN(models[rank], TpGpt::Create({config, sp}, comm));
    TpGpt& gpt = *models[rank];
    DenseUnitAccess access(gpt.spec(), gpt.ShardInit(full_init));
    ZS_ASSIGN_OR_RETURN(losses[rank],
                        WholeModelForwardBackward(gpt, access, b.tokens, b.targets, kBatch, kSeq));
    EXPECT_TRUE(access.idle());
    local[rank].resize(access.num_units());
    for (int u = 0; u < access.num_units(); ++u) {
      for (size_t p = 0; p < gpt.spec().units[u].params.size(); ++p) {
        std::span<float> g = access.GradData(u, int(p));
        local[rank][u].emplace_back(g.begin(), g.end());
      }
    }
    return OkStatus();
  });
  if (::testing::Test::HasFatalFailure()) return;
  for (int r = 0; r < tp; ++r) EXPECT_EQ(losses[r], losses[0]) << "rank " << r;
  EXPECT_NEAR(losses[0], *ref_loss, kLossRtol * std::abs(*ref_loss));
  for (size_t u = 0; u < full_spec.units.size(); ++u) {
    for (size_t p = 0; p < full_spec.units[u].params.size(); ++p) {
      const std::string name = full_spec.units[u].name + "/" + full_spec.units[u].params[p].name;
      const TpParamLayout& layout = models[0]->layout(int(u), int(p));
      std::vector<float> gathered(layout.full_numel(), NAN);
      for (int r = 0; r < tp; ++r) {
        PlaceLocal(layout, r, tp, local[r][u][p], gathered);
        if (!layout.tensor_parallel()) {  // replicated: the same full gradient on every rank
          EXPECT_EQ(local[r][u][p], local[0][u][p]) << name << " rank " << r;
        }
      }
      ExpectClose(name, gathered, ref_access.GradData(int(u), int(p)), kGradRtol);
    }
  }
  // Padded vocabulary rows (the last rank's tail) get no gradient.
  const VocabShard last = models[tp - 1]->vocab_shard();
  const std::vector<float>& dwte = local[tp - 1][0][0];
  for (size_t i = last.valid() * config.hidden; i < dwte.size(); ++i) ASSERT_EQ(dwte[i], 0.0f);
}

TEST(TpGptTest, SpecMirrorsNnGptWithLocalShapesAndTensorParallelFlags) {
  auto ref = MakeNn(Small());
  RunTp(2, [&](int rank, Communicator& comm) -> Status {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<TpGpt> gpt, TpGpt::Create({Small(), false}, comm));
    const ModelSpec& spec = gpt->spec();
    ZS_RETURN_IF_ERROR(spec.Validate());
    const ModelSpec& full = ref->spec();
    EXPECT_EQ(gpt->head_unit(), 3);
    EXPECT_EQ(gpt->padded_vocab(), 14);
    EXPECT_EQ(gpt->vocab_shard().start, 7 * rank);
    EXPECT_EQ(gpt->vocab_shard().valid(), rank == 0 ? 7 : 6);
    if (spec.units.size() != full.units.size()) return InternalError("unit count");
    for (size_t u = 0; u < full.units.size(); ++u) {
      EXPECT_EQ(spec.units[u].name, full.units[u].name);
      if (spec.units[u].params.size() != full.units[u].params.size())
        return InternalError("params");
      for (size_t p = 0; p < full.units[u].params.size(); ++p) {
        const ParamSpec& s = spec.units[u].params[p];
        const ParamSpec& f = full.units[u].params[p];
        EXPECT_EQ(s.name, f.name);
        EXPECT_EQ(s.weight_decay, f.weight_decay) << s.name;
        EXPECT_EQ(s.shape, gpt->layout(int(u), int(p)).LocalShape(2)) << s.name;
        EXPECT_EQ(gpt->layout(int(u), int(p)).full_shape, f.shape) << s.name;
        const bool split = s.name == "wte.weight" || s.name.starts_with("attn.qkv.") ||
                           s.name == "attn.proj.weight" || s.name.starts_with("mlp.fc.") ||
                           s.name == "mlp.proj.weight";
        EXPECT_EQ(s.tensor_parallel, split) << s.name;
      }
    }
    const int64_t h = 16;
    EXPECT_EQ(spec.units[0].params[0].shape, (std::vector<int64_t>{7, h}));
    EXPECT_EQ(spec.units[1].params[2].shape, (std::vector<int64_t>{3 * h / 2, h}));  // qkv
    EXPECT_EQ(spec.units[1].params[4].shape, (std::vector<int64_t>{h, h / 2}));      // proj
    EXPECT_EQ(spec.units[1].params[5].shape, (std::vector<int64_t>{h}));             // proj.bias
    EXPECT_EQ(spec.units[1].params[10].shape, (std::vector<int64_t>{h, 2 * h}));     // mlp.proj
    return OkStatus();
  });
}

TEST(TpGptTest, InitIsTheSliceOfNnGptsInit) {
  auto ref = MakeNn(Small());
  DenseUnitAccess full(ref->spec(), ref->Init(7));
  for (int tp : {2, 4}) {
    std::vector<std::vector<std::vector<float>>> rebuilt(ref->spec().units.size());
    for (size_t u = 0; u < rebuilt.size(); ++u) {
      for (size_t p = 0; p < ref->spec().units[u].params.size(); ++p) {
        rebuilt[u].emplace_back(full.ParamData(int(u), int(p)).size(), NAN);
      }
    }
    RunTp(tp, [&](int rank, Communicator& comm) -> Status {
      ZS_ASSIGN_OR_RETURN(std::unique_ptr<TpGpt> gpt, TpGpt::Create({Small(), true}, comm));
      DenseUnitAccess local(gpt->spec(), gpt->Init(7));
      for (size_t u = 0; u < rebuilt.size(); ++u) {
        for (size_t p = 0; p < rebuilt[u].size(); ++p) {
          const TpParamLayout& l = gpt->layout(int(u), int(p));
          if (l.tensor_parallel() || rank == 0) {
            PlaceLocal(l, rank, tp, local.ParamData(int(u), int(p)), rebuilt[u][p]);
          }
        }
      }
      // Padded wte rows are zero.
      std::span<float> wte = local.ParamData(0, 0);
      for (size_t i = gpt->vocab_shard().valid() * 16; i < wte.size(); ++i) EXPECT_EQ(wte[i], 0.0f);
      return OkStatus();
    });
    for (size_t u = 0; u < rebuilt.size(); ++u) {
      for (size_t p = 0; p < rebuilt[u].size(); ++p) {
        std::span<float> want = full.ParamData(int(u), int(p));
        ASSERT_EQ(std::memcmp(rebuilt[u][p].data(), want.data(), want.size() * 4), 0)
            << "tp " << tp << " unit " << u << " param " << p;
      }
    }
  }
}

TEST(TpGptTest, LossAndGradientsMatchNnGpt) {
  auto ref = MakeNn(Small());
  const ParamInit init = LargeInit(ref->spec());
  const Batch b = MakeBatch(13, kBatch, kSeq, 3);
  for (bool sp : {false, true}) {
    for (int tp : {1, 2, 4}) ExpectMatchesNn(Small(), tp, sp, init, b);
  }
}

TEST(TpGptTest, VocabularyPaddedOnEveryRankButTheFirst) {
  // vocab 9 over tp 4: Vp 12, shards of 3; the last rank holds 0 real rows.
  nn::GptConfig config{.vocab = 9, .max_seq = 4, .layers = 1, .hidden = 8, .heads = 4};
  auto ref = MakeNn(config);
  const Batch b = MakeBatch(9, kBatch, kSeq, 5);
  for (bool sp : {false, true}) ExpectMatchesNn(config, 4, sp, LargeInit(ref->spec()), b);
}

// From Init(seed), a few SGD steps at tp 4 with sequence parallelism track nn::Gpt's losses.
TEST(TpGptTest, SgdStepsFromInitTrackNnGpt) {
  const int tp = 4, steps = 4;
  const float lr = 0.5f;
  const Batch b = MakeBatch(13, kBatch, kSeq, 17);
  auto ref = MakeNn(Small());
  DenseUnitAccess ref_access(ref->spec(), ref->Init(5));
  std::vector<float> ref_losses;
  for (int s = 0; s < steps; ++s) {
    ref_access.ZeroGrads();
    ref_losses.push_back(*ref->ForwardBackward(ref_access, b.tokens, b.targets, kBatch, kSeq));
    for (int u = 0; u < ref_access.num_units(); ++u) {
      std::span<float> p = ref_access.UnitParams(u), g = ref_access.UnitGrads(u);
      for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * g[i];
    }
  }
  EXPECT_LT(ref_losses.back(), ref_losses.front());
  std::vector<std::vector<float>> losses(tp);
  RunTp(tp, [&](int rank, Communicator& comm) -> Status {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<TpGpt> gpt, TpGpt::Create({Small(), true}, comm));
    DenseUnitAccess access(gpt->spec(), gpt->Init(5));
    for (int s = 0; s < steps; ++s) {
      access.ZeroGrads();
      ZS_ASSIGN_OR_RETURN(const float loss, WholeModelForwardBackward(*gpt, access, b.tokens,
                                                                      b.targets, kBatch, kSeq));
      losses[rank].push_back(loss);
      for (int u = 0; u < access.num_units(); ++u) {
        std::span<float> p = access.UnitParams(u), g = access.UnitGrads(u);
        for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * g[i];
      }
    }
    return OkStatus();
  });
  for (int s = 0; s < steps; ++s) {
    EXPECT_NEAR(losses[0][s], ref_losses[s], 1e-5 * ref_losses[s]) << "step " << s;
    for (int r = 1; r < tp; ++r) EXPECT_EQ(losses[r][s], losses[0][s]);
  }
}

TEST(TpGptTest, BracketOrderIsNnGpts) {
  auto ref = MakeNn(Small());
  DenseUnitAccess ref_access(ref->spec(), ref->Init(1));
  const Batch b = MakeBatch(13, kBatch, kSeq, 9);
  ASSERT_TRUE(ref->ForwardBackward(ref_access, b.tokens, b.targets, kBatch, kSeq).ok());
  RunTp(2, [&](int, Communicator& comm) -> Status {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<TpGpt> gpt, TpGpt::Create({Small(), true}, comm));
    DenseUnitAccess access(gpt->spec(), gpt->Init(1));
    ZS_RETURN_IF_ERROR(
        WholeModelForwardBackward(*gpt, access, b.tokens, b.targets, kBatch, kSeq).status());
    EXPECT_EQ(access.trace(), ref_access.trace());
    access.ClearTrace();
    ZS_RETURN_IF_ERROR(WholeModelForward(*gpt, access, b.tokens, b.targets, kBatch, kSeq).status());
    EXPECT_EQ(access.trace().size(), 10u);  // the forward half
    return OkStatus();
  });
}

// The parts as a pipeline would drive them: two micro-batches in flight (both forwards, then
// both backwards in reverse), blocks recomputed from their stored input into scratch
// activations, and the head given a copy of wte with its gradient accumulated into a separate
// buffer. The gradients must equal two whole-model ForwardBackward calls' up to the order in
// which the two micro-batches' contributions are added (measured 1e-7 of each unit's largest
// gradient; checked at 2e-6).
TEST(TpGptTest, PartsWithMicroBatchesInFlightAndRecompute) {
  const int tp = 2;
  auto ref = MakeNn(Small());
  const ParamInit init = LargeInit(ref->spec());
  const Batch mb[2] = {MakeBatch(13, kBatch, kSeq, 21), MakeBatch(13, kBatch, kSeq, 22)};
  RunTp(tp, [&](int, Communicator& comm) -> Status {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<TpGpt> gpt, TpGpt::Create({Small(), true}, comm));
    const int layers = Small().layers;
    DenseUnitAccess whole(gpt->spec(), gpt->ShardInit(init));
    whole.set_backward_scale(0.5f);
    float whole_loss[2];
    for (int m = 0; m < 2; ++m) {
      ZS_ASSIGN_OR_RETURN(whole_loss[m], WholeModelForwardBackward(*gpt, whole, mb[m].tokens,
                                                                   mb[m].targets, kBatch, kSeq));
    }

    DenseUnitAccess parts(gpt->spec(), gpt->ShardInit(init));
    parts.set_backward_scale(0.5f);
    const int64_t n = gpt->local_rows(kBatch * kSeq) * Small().hidden;
    struct InFlight {
      TpEmbeddingActivations embed;
      std::vector<std::vector<float>> x;  // block inputs (kept), x[L] the head's input
      TpHeadActivations head;
    };
    InFlight f[2];
    std::vector<float> wte_copy(parts.ParamData(0, 0).begin(), parts.ParamData(0, 0).end());
    std::vector<float> dwte_copy(wte_copy.size(), 0.0f);
    TpBlockActivations scratch;  // forward activations are dropped: one scratch for all
    for (int m = 0; m < 2; ++m) {
      f[m].x.assign(layers + 1, std::vector<float>(n));
      ZS_RETURN_IF_ERROR(parts.BeginForward(0));
      ZS_RETURN_IF_ERROR(
          gpt->EmbeddingForward(parts, mb[m].tokens, kBatch, kSeq, f[m].embed, f[m].x[0]));
      ZS_RETURN_IF_ERROR(parts.EndForward(0));
      for (int l = 0; l < layers; ++l) {
        ZS_RETURN_IF_ERROR(parts.BeginForward(gpt->block_unit(l)));
        ZS_RETURN_IF_ERROR(
            gpt->BlockForward(l, parts, f[m].x[l], kBatch, kSeq, scratch, f[m].x[l + 1]));
        ZS_RETURN_IF_ERROR(parts.EndForward(gpt->block_unit(l)));
      }
      ZS_RETURN_IF_ERROR(parts.BeginForward(gpt->head_unit()));
      ZS_ASSIGN_OR_RETURN(const float loss, gpt->HeadForward(parts, f[m].x[layers], mb[m].targets,
                                                             wte_copy, f[m].head));
      ZS_RETURN_IF_ERROR(parts.EndForward(gpt->head_unit()));
      EXPECT_EQ(loss, whole_loss[m]) << "micro-batch " << m;
    }
    std::vector<float> dx(n), dy(n);
    for (int m = 1; m >= 0; --m) {
      ZS_RETURN_IF_ERROR(parts.BeginBackward(gpt->head_unit()));
      ZS_RETURN_IF_ERROR(
          gpt->HeadBackward(parts, f[m].x[layers], wte_copy, dwte_copy, f[m].head, dy));
      ZS_RETURN_IF_ERROR(parts.EndBackward(gpt->head_unit()));
      for (int l = layers - 1; l >= 0; --l) {
        ZS_RETURN_IF_ERROR(parts.BeginBackward(gpt->block_unit(l)));
        ZS_RETURN_IF_ERROR(gpt->BlockForward(l, parts, f[m].x[l], kBatch, kSeq, scratch,
                                             std::span<float>(dx)));  // recompute
        ZS_RETURN_IF_ERROR(gpt->BlockBackward(l, parts, f[m].x[l], dy, scratch, dx));
        ZS_RETURN_IF_ERROR(parts.EndBackward(gpt->block_unit(l)));
        dx.swap(dy);
      }
      ZS_RETURN_IF_ERROR(parts.BeginBackward(0));
      ZS_RETURN_IF_ERROR(gpt->EmbeddingBackward(parts, dy, f[m].embed));
      ZS_RETURN_IF_ERROR(parts.EndBackward(0));
    }
    std::span<float> dwte = parts.GradData(0, 0);
    for (size_t i = 0; i < dwte.size(); ++i) dwte[i] += dwte_copy[i];  // the tied gradient
    for (int u = 0; u < whole.num_units(); ++u) {
      ExpectClose("unit " + std::to_string(u), parts.UnitGrads(u), whole.UnitGrads(u), 2e-6);
    }
    return OkStatus();
  });
}

// The whole model's activations are the one chunk's: tracked while it lives, gone after.
TEST(TpGptTest, ActivationsAreTracked) {
  RunTp(2, [&](int, Communicator& comm) -> Status {
    MemoryTracker tracker;
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<TpGpt> gpt, TpGpt::Create({Small(), false}, comm));
    DenseUnitAccess access(gpt->spec(), gpt->Init(1));
    const Batch b = MakeBatch(13, kBatch, kSeq, 2);
    {
      GptChunkOptions options;
      options.end = gpt->num_segments();
      options.batch = kBatch;
      options.seq = kSeq;
      GptChunk chunk(
          *gpt, access, options,
          [&](int, std::span<int32_t> tokens, std::span<int32_t> targets) {
            std::copy(b.tokens.begin(), b.tokens.end(), tokens.begin());
            std::copy(b.targets.begin(), b.targets.end(), targets.begin());
            return OkStatus();
          },
          /*tied=*/nullptr, &tracker);
      ZS_RETURN_IF_ERROR(chunk.Forward(0, {}, {}).status());
      EXPECT_GT(chunk.activation_bytes(), kBatch * kSeq * 16 * 4 * 3);
      EXPECT_EQ(tracker.Current(MemoryTier::kHost, MemoryCategory::kActivations),
                chunk.activation_bytes());
      ZS_RETURN_IF_ERROR(chunk.Backward(0, {}, {}));
      EXPECT_EQ(tracker.Current(MemoryTier::kHost, MemoryCategory::kActivations),
                chunk.activation_bytes());
      EXPECT_GT(chunk.peak_activation_bytes(), kBatch * kSeq * 16 * 4 * 3);
    }
    EXPECT_EQ(tracker.Current(MemoryTier::kHost, MemoryCategory::kActivations), 0);
    ZS_RETURN_IF_ERROR(
        WholeModelForwardBackward(*gpt, access, b.tokens, b.targets, kBatch, kSeq, &tracker)
            .status());
    EXPECT_EQ(tracker.Current(MemoryTier::kHost, MemoryCategory::kActivations), 0);
    EXPECT_GT(tracker.Peak(MemoryTier::kHost, MemoryCategory::kActivations),
              kBatch * kSeq * 16 * 4 * 3);
    return OkStatus();
  });
}

// The collectives' TpScratch is in the tracker as it grows, at each buffer's largest request
// (tp_scratch.h), and leaves it with the model. Small() at tp 2, rows = 2 x 4, H = 16, max_seq 6:
// without sequence parallelism only Partial is used, by wpe's partial gradient [max_seq, H]
// (a row-parallel bias's [H] is smaller); with it, forward gathers [rows, H] into Full, and
// backward also needs Partial for a column-parallel input gradient [rows, H] (above wpe's).
TEST(TpGptTest, ScratchIsTrackedAsItGrows) {
  constexpr int64_t kH = 16, kMaxSeq = 6, kRows = kBatch * kSeq, kF = sizeof(float);
  for (bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "sequence parallel" : "tensor parallel");
    RunTp(2, [&](int, Communicator& comm) -> Status {
      MemoryTracker tracker;
      auto tracked = [&] {
        return tracker.Current(MemoryTier::kHost, MemoryCategory::kActivations);
      };
      {
        ZS_ASSIGN_OR_RETURN(std::unique_ptr<TpGpt> gpt,
                            TpGpt::Create({Small(), sp}, comm, nullptr, &tracker));
        EXPECT_EQ(gpt->scratch_bytes(), 0);
        DenseUnitAccess access(gpt->spec(), gpt->Init(1));
        const Batch b = MakeBatch(13, kBatch, kSeq, 2);
        ZS_RETURN_IF_ERROR(
            WholeModelForward(*gpt, access, b.tokens, b.targets, kBatch, kSeq).status());
        EXPECT_EQ(gpt->scratch_bytes(), sp ? kRows * kH * kF : 0);
        EXPECT_EQ(tracked(), gpt->scratch_bytes());
        const int64_t full = sp ? kRows * kH : 0;
        const int64_t partial = sp ? std::max(kRows * kH, kMaxSeq * kH) : kMaxSeq * kH;
        for (int step = 0; step < 2; ++step) {  // the second step reuses the buffers
          ZS_RETURN_IF_ERROR(
              WholeModelForwardBackward(*gpt, access, b.tokens, b.targets, kBatch, kSeq).status());
          EXPECT_EQ(gpt->scratch_bytes(), (full + partial) * kF);
          EXPECT_EQ(tracked(), gpt->scratch_bytes());
        }
      }
      EXPECT_EQ(tracked(), 0);
      return OkStatus();
    });
  }
}

// Sequence parallelism's point: what a micro-batch keeps outside the tp regions is this rank's
// row block only (the gathered inputs live in the shared TpScratch, not in the activations).
TEST(TpGptTest, SequenceParallelActivationsKeepOnlyTheRowBlock) {
  const int tp = 4;
  int64_t bytes[2] = {0, 0};
  for (bool sp : {false, true}) {
    RunTp(tp, [&](int rank, Communicator& comm) -> Status {
      ZS_ASSIGN_OR_RETURN(std::unique_ptr<TpGpt> gpt, TpGpt::Create({Small(), sp}, comm));
      DenseUnitAccess access(gpt->spec(), gpt->Init(1));
      const Batch b = MakeBatch(13, kBatch, kSeq, 2);
      const int64_t local = gpt->local_rows(kBatch * kSeq);
      EXPECT_EQ(local, sp ? 2 : 8);
      std::vector<float> x(local * 16), y(local * 16);
      TpEmbeddingActivations embed;
      TpBlockActivations block;
      ZS_RETURN_IF_ERROR(access.BeginForward(0));
      ZS_RETURN_IF_ERROR(gpt->EmbeddingForward(access, b.tokens, kBatch, kSeq, embed, x));
      ZS_RETURN_IF_ERROR(access.EndForward(0));
      ZS_RETURN_IF_ERROR(access.BeginForward(1));
      ZS_RETURN_IF_ERROR(gpt->BlockForward(0, access, x, kBatch, kSeq, block, y));
      ZS_RETURN_IF_ERROR(access.EndForward(1));
      EXPECT_EQ(block.ln1_out.size(), size_t(local * 16));
      EXPECT_EQ(block.x1.size(), size_t(local * 16));
      if (rank == 0) bytes[sp] = block.bytes();
      return OkStatus();
    });
  }
  EXPECT_LT(bytes[1], bytes[0]);
}

TEST(TpGptTest, ErrorsNameTheSizesAndOpenNoBracket) {
  RunTp(2, [&](int, Communicator& comm) -> Status {
    nn::GptConfig three_heads = Small();
    three_heads.heads = 2;
    three_heads.hidden = 6;
    EXPECT_TRUE(TpGpt::Create({three_heads, false}, comm).ok());
    three_heads.heads = 3;
    ExpectInvalidArgument(TpGpt::Create({three_heads, false}, comm).status(), {"heads 3", "tp 2"});
    nn::GptConfig bad = Small();
    bad.vocab = 0;
    EXPECT_EQ(TpGpt::Create({bad, false}, comm).status().code(), StatusCode::kInvalidArgument);

    ZS_ASSIGN_OR_RETURN(std::unique_ptr<TpGpt> gpt, TpGpt::Create({Small(), true}, comm));
    DenseUnitAccess access(gpt->spec(), gpt->Init(1));
    const Batch odd = MakeBatch(13, 1, 3, 2);  // 3 rows over tp 2, sequence parallel
    ExpectInvalidArgument(
        WholeModelForwardBackward(*gpt, access, odd.tokens, odd.targets, 1, 3).status(),
        {"rows (batch * seq) 3", "tp 2"});
    Batch b = MakeBatch(13, kBatch, kSeq, 2);
    b.tokens[3] = 13;
    ExpectInvalidArgument(
        WholeModelForward(*gpt, access, b.tokens, b.targets, kBatch, kSeq).status(),
        {"token 13", "vocab 13"});
    b.tokens[3] = 0;
    ExpectInvalidArgument(WholeModelForward(*gpt, access, b.tokens, b.targets, kBatch, 7).status(),
                          {"seq 7", "max_seq 6"});
    auto ref = MakeNn(Small());  // the full model's shapes are not this rank's
    DenseUnitAccess full(ref->spec(), ref->Init(1));
    ExpectInvalidArgument(WholeModelForward(*gpt, full, b.tokens, b.targets, kBatch, kSeq).status(),
                          {"not this rank's TpGpt", "tp 2"});
    EXPECT_TRUE(access.trace().empty());
    EXPECT_TRUE(full.trace().empty());
    // A part given a buffer of the wrong size.
    TpBlockActivations act;
    std::vector<float> x(5), y(5);
    ZS_RETURN_IF_ERROR(access.BeginForward(1));
    ExpectInvalidArgument(gpt->BlockForward(0, access, x, kBatch, kSeq, act, y),
                          {"block input has 5 floats", "local rows 4"});
    return access.EndForward(1);
  });
}

}  // namespace
}  // namespace zs::parallel
