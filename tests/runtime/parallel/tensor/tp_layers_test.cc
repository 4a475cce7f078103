// Every tensor-parallel layer against the unsplit runtime/nn layer: the same full parameters
// (each rank gets its slice through the layer's TpParamLayout), the same input and output
// gradient, at tp 1, 2 and 4, with and without sequence parallelism; the output, the input
// gradient and every parameter gradient gathered over tp must match. Replicated parameters'
// gradients must be the same bits on every rank. Plus the mappings on their own, the
// vocabulary-parallel cross-entropy against nn's and finite differences, and the size errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/model/dense_unit_access.h"
#include "runtime/nn/causal_self_attention.h"
#include "runtime/nn/cross_entropy.h"
#include "runtime/nn/embedding.h"
#include "runtime/nn/linear.h"
#include "runtime/nn/mlp.h"
#include "runtime/nn/transformer_block.h"
#include "runtime/parallel/tensor/column_parallel_linear.h"
#include "runtime/parallel/tensor/mappings.h"
#include "runtime/parallel/tensor/row_parallel_linear.h"
#include "runtime/parallel/tensor/tp_attention.h"
#include "runtime/parallel/tensor/tp_mlp.h"
#include "runtime/parallel/tensor/tp_transformer_block.h"
#include "runtime/parallel/tensor/vocab_parallel_cross_entropy.h"
#include "runtime/parallel/tensor/vocab_parallel_embedding.h"
#include "tests/runtime/nn/grad_check.h"
#include "tests/runtime/parallel/tensor/tp_test_support.h"

namespace zs::tp {
namespace {

using nn::testing::OneUnit;
using nn::testing::RandomInit;
using nn::testing::RandomVector;
using testing::ExpectClose;
using testing::ExpectInvalidArgument;
using testing::Piece;
using testing::PutPiece;
using testing::RunTp;
using testing::TakePiece;

// Float results of a split layer differ from the unsplit one's only in summation order (each
// rank's partial dot products, then the rank-order sum): a few ulps of the tensor's largest
// terms. The worst measured difference here is 4e-7 of the tensor's largest magnitude
// (ZS_TP_TEST_ERRORS=1 prints them); 4e-6 leaves 10x for other BLAS kernels' rounding, and a
// wrong slice or a missing reduction is off by O(1).
constexpr double kRtol = 4e-6;

// One tp rank's instance of the layer under test; the activations live in the closures.
struct TpModule {
  std::vector<TpModuleParam> params;
  std::function<Status(UnitAccess&, Communicator&, const float* x, float* y)> forward;
  std::function<Status(UnitAccess&, Communicator&, const float* x, const float* dy, float* dx)>
      backward;
};

struct LayerCase {
  std::vector<nn::ModuleParam> full_params;  // the unsplit layer's
  int64_t rows = 0, x_cols = 0, y_cols = 0;  // full x [rows, x_cols], y [rows, y_cols]
  Piece x_piece = Piece::kAll, y_piece = Piece::kAll;
  std::function<void(UnitAccess&, const float* x, float* y)> ref_forward;
  std::function<void(UnitAccess&, const float* x, const float* dy, float* dx)> ref_backward;
  std::function<StatusOr<TpModule>(const TpOptions&)> make;
};

void CheckAgainstUnsplit(const LayerCase& c, int tp, uint64_t seed) {
  SCOPED_TRACE("tp " + std::to_string(tp));
  DenseUnitAccess full(OneUnit(c.full_params), RandomInit(c.full_params, seed));
  const size_t num_params = c.full_params.size();
  std::vector<std::vector<float>> full_values;
  for (size_t p = 0; p < num_params; ++p) {
    std::span<float> v = full.ParamData(0, int(p));
    full_values.emplace_back(v.begin(), v.end());
  }
  const std::vector<float> x = RandomVector(c.rows * c.x_cols, seed + 1);
  const std::vector<float> dy = RandomVector(c.rows * c.y_cols, seed + 2);
  std::vector<float> y_ref(c.rows * c.y_cols), dx_ref(c.rows * c.x_cols);
  ASSERT_TRUE(full.BeginForward(0).ok());
  c.ref_forward(full, x.data(), y_ref.data());
  ASSERT_TRUE(full.EndForward(0).ok());
  ASSERT_TRUE(full.BeginBackward(0).ok());
  c.ref_backward(full, x.data(), dy.data(), dx_ref.data());
  ASSERT_TRUE(full.EndBackward(0).ok());

  std::vector<float> y(y_ref.size()), dx(dx_ref.size());
  std::vector<std::vector<TpModuleParam>> params(tp);
  std::vector<std::vector<std::vector<float>>> grads(tp);  // [rank][param]
  RunTp(tp, [&](int rank, Communicator& comm) -> Status {
    const TpOptions options =
        TpOptions::Of(comm, c.x_piece == Piece::kRowBlock || c.y_piece == Piece::kRowBlock);
    ZS_ASSIGN_OR_RETURN(TpModule m, c.make(options));
    ModelSpec spec;
    spec.units.push_back({"unit", {}});
    for (const TpModuleParam& p : m.params) spec.units[0].params.push_back(p.spec);
    DenseUnitAccess local(spec, [&](int, int p, std::span<float> values) {
      SliceFull(m.params[p].layout, rank, tp, full_values[p], values);
    });
    const std::vector<float> x_local = TakePiece(c.x_piece, x, c.rows, c.x_cols, rank, tp);
    const std::vector<float> dy_local = TakePiece(c.y_piece, dy, c.rows, c.y_cols, rank, tp);
    std::vector<float> y_local(dy_local.size()), dx_local(x_local.size());
    ZS_RETURN_IF_ERROR(local.BeginForward(0));
    ZS_RETURN_IF_ERROR(m.forward(local, comm, x_local.data(), y_local.data()));
    ZS_RETURN_IF_ERROR(local.EndForward(0));
    ZS_RETURN_IF_ERROR(local.BeginBackward(0));
    ZS_RETURN_IF_ERROR(m.backward(local, comm, x_local.data(), dy_local.data(), dx_local.data()));
    ZS_RETURN_IF_ERROR(local.EndBackward(0));
    // Ranks write disjoint pieces (kAll: rank 0 only).
    if (c.y_piece != Piece::kAll || rank == 0)
      PutPiece(c.y_piece, y_local, c.rows, c.y_cols, rank, tp, y);
    if (c.x_piece != Piece::kAll || rank == 0)
      PutPiece(c.x_piece, dx_local, c.rows, c.x_cols, rank, tp, dx);
    for (size_t p = 0; p < m.params.size(); ++p) {
      std::span<float> g = local.GradData(0, int(p));
      grads[rank].emplace_back(g.begin(), g.end());
    }
    params[rank] = std::move(m.params);
    return OkStatus();
  });
  if (::testing::Test::HasFatalFailure()) return;
  ExpectClose("y", y, y_ref, kRtol);
  ExpectClose("dx", dx, dx_ref, kRtol);
  for (size_t p = 0; p < num_params; ++p) {
    const TpParamLayout& layout = params[0][p].layout;
    const std::string& name = params[0][p].spec.name;
    EXPECT_EQ(params[0][p].spec.tensor_parallel, layout.tensor_parallel()) << name;
    EXPECT_EQ(layout.full_shape, c.full_params[p].spec.shape) << name;
    std::vector<float> gathered(full_values[p].size(), NAN);
    for (int r = 0; r < tp; ++r) {
      PlaceLocal(layout, r, tp, grads[r][p], gathered);
      if (!layout.tensor_parallel()) {
        EXPECT_EQ(grads[r][p], grads[0][p]) << name << " rank " << r;
      }
    }
    std::span<float> g_ref = full.GradData(0, int(p));
    ExpectClose(name, gathered, g_ref, kRtol);
  }
}

void CheckAtEveryDegree(const std::function<LayerCase(bool sequence_parallel)>& make_case,
                        uint64_t seed) {
  for (bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "sequence parallel" : "no sequence parallelism");
    const LayerCase c = make_case(sp);
    for (int tp : {1, 2, 4}) CheckAgainstUnsplit(c, tp, seed);
  }
}

// ---- the layers ----------------------------------------------------------------------------

TEST(ColumnParallelLinearTest, MatchesLinear) {
  for (bool bias : {true, false}) {
    const int64_t rows = 8, in = 6, out = 12;
    auto linear = std::make_shared<nn::Linear>(0, 0, in, out, bias);
    CheckAtEveryDegree(
        [&](bool sp) {
          LayerCase c;
          c.full_params = linear->params("fc.");
          c.rows = rows, c.x_cols = in, c.y_cols = out;
          c.x_piece = sp ? Piece::kRowBlock : Piece::kAll;
          c.y_piece = Piece::kColumnBlock;
          c.ref_forward = [=](UnitAccess& a, const float* x, float* y) {
            linear->Forward(a, x, rows, y);
          };
          c.ref_backward = [=](UnitAccess& a, const float* x, const float* dy, float* dx) {
            linear->Backward(a, x, dy, rows, dx);
          };
          c.make = [=](const TpOptions& o) -> StatusOr<TpModule> {
            ZS_ASSIGN_OR_RETURN(ColumnParallelLinear l,
                                ColumnParallelLinear::Create(0, 0, in, out, o, bias));
            auto scratch = std::make_shared<TpScratch>();
            TpModule m;
            m.params = l.params("fc.");
            m.forward = [=](UnitAccess& a, Communicator& tp, const float* x, float* y) {
              return l.Forward(a, tp, x, rows, *scratch, y);
            };
            m.backward = [=](UnitAccess& a, Communicator& tp, const float* x, const float* dy,
                             float* dx) { return l.Backward(a, tp, x, dy, rows, *scratch, dx); };
            return m;
          };
          return c;
        },
        11);
  }
}

TEST(RowParallelLinearTest, MatchesLinear) {
  for (bool bias : {true, false}) {
    const int64_t rows = 8, in = 12, out = 6;
    auto linear = std::make_shared<nn::Linear>(0, 0, in, out, bias);
    CheckAtEveryDegree(
        [&](bool sp) {
          LayerCase c;
          c.full_params = linear->params("proj.");
          c.rows = rows, c.x_cols = in, c.y_cols = out;
          c.x_piece = Piece::kColumnBlock;
          c.y_piece = sp ? Piece::kRowBlock : Piece::kAll;
          c.ref_forward = [=](UnitAccess& a, const float* x, float* y) {
            linear->Forward(a, x, rows, y);
          };
          c.ref_backward = [=](UnitAccess& a, const float* x, const float* dy, float* dx) {
            linear->Backward(a, x, dy, rows, dx);
          };
          c.make = [=](const TpOptions& o) -> StatusOr<TpModule> {
            ZS_ASSIGN_OR_RETURN(RowParallelLinear l,
                                RowParallelLinear::Create(0, 0, in, out, o, bias));
            auto scratch = std::make_shared<TpScratch>();
            TpModule m;
            m.params = l.params("proj.");
            m.forward = [=](UnitAccess& a, Communicator& tp, const float* x, float* y) {
              return l.Forward(a, tp, x, rows, *scratch, y);
            };
            m.backward = [=](UnitAccess& a, Communicator& tp, const float* x, const float* dy,
                             float* dx) { return l.Backward(a, tp, x, dy, rows, *scratch, dx); };
            return m;
          };
          return c;
        },
        21);
  }
}

TEST(TpAttentionTest, MatchesCausalSelfAttention) {
  const int64_t batch = 2, seq = 4, hidden = 16, heads = 4, rows = batch * seq;
  auto attn = std::make_shared<nn::CausalSelfAttention>(0, 0, hidden, heads);
  CheckAtEveryDegree(
      [&](bool sp) {
        LayerCase c;
        c.full_params = attn->params("attn.");
        c.rows = rows, c.x_cols = hidden, c.y_cols = hidden;
        c.x_piece = c.y_piece = sp ? Piece::kRowBlock : Piece::kAll;
        c.ref_forward = [=](UnitAccess& a, const float* x, float* y) {
          attn->Forward(a, x, batch, seq, y);
        };
        c.ref_backward = [=](UnitAccess& a, const float* x, const float* dy, float* dx) {
          attn->Backward(a, x, dy, dx);
        };
        c.make = [=](const TpOptions& o) -> StatusOr<TpModule> {
          ZS_ASSIGN_OR_RETURN(TpAttention l, TpAttention::Create(0, 0, hidden, heads, o));
          auto act = std::make_shared<TpAttentionActivations>();
          auto scratch = std::make_shared<TpScratch>();
          TpModule m;
          m.params = l.params("attn.");
          m.forward = [=](UnitAccess& a, Communicator& tp, const float* x, float* y) {
            return l.Forward(a, tp, x, batch, seq, *act, *scratch, y);
          };
          m.backward = [=](UnitAccess& a, Communicator& tp, const float* x, const float* dy,
                           float* dx) { return l.Backward(a, tp, x, dy, *act, *scratch, dx); };
          return m;
        };
        return c;
      },
      31);
}

TEST(TpMlpTest, MatchesMlp) {
  const int64_t rows = 8, hidden = 6;
  auto mlp = std::make_shared<nn::Mlp>(0, 0, hidden);
  CheckAtEveryDegree(
      [&](bool sp) {
        LayerCase c;
        c.full_params = mlp->params("mlp.");
        c.rows = rows, c.x_cols = hidden, c.y_cols = hidden;
        c.x_piece = c.y_piece = sp ? Piece::kRowBlock : Piece::kAll;
        c.ref_forward = [=](UnitAccess& a, const float* x, float* y) {
          mlp->Forward(a, x, rows, y);
        };
        c.ref_backward = [=](UnitAccess& a, const float* x, const float* dy, float* dx) {
          mlp->Backward(a, x, dy, dx);
        };
        c.make = [=](const TpOptions& o) -> StatusOr<TpModule> {
          ZS_ASSIGN_OR_RETURN(TpMlp l, TpMlp::Create(0, 0, hidden, o));
          auto act = std::make_shared<TpMlpActivations>();
          auto scratch = std::make_shared<TpScratch>();
          TpModule m;
          m.params = l.params("mlp.");
          m.forward = [=](UnitAccess& a, Communicator& tp, const float* x, float* y) {
            return l.Forward(a, tp, x, rows, *act, *scratch, y);
          };
          m.backward = [=](UnitAccess& a, Communicator& tp, const float* x, const float* dy,
                           float* dx) { return l.Backward(a, tp, x, dy, *act, *scratch, dx); };
          return m;
        };
        return c;
      },
      41);
}

TEST(TpTransformerBlockTest, MatchesTransformerBlock) {
  const int64_t batch = 2, seq = 4, hidden = 8, heads = 4, rows = batch * seq;
  auto block = std::make_shared<nn::TransformerBlock>(0, 0, hidden, heads);
  CheckAtEveryDegree(
      [&](bool sp) {
        LayerCase c;
        c.full_params = block->params("");
        c.rows = rows, c.x_cols = hidden, c.y_cols = hidden;
        c.x_piece = c.y_piece = sp ? Piece::kRowBlock : Piece::kAll;
        c.ref_forward = [=](UnitAccess& a, const float* x, float* y) {
          block->Forward(a, x, batch, seq, y);
        };
        c.ref_backward = [=](UnitAccess& a, const float* x, const float* dy, float* dx) {
          block->Backward(a, x, dy, dx);
        };
        c.make = [=](const TpOptions& o) -> StatusOr<TpModule> {
          ZS_ASSIGN_OR_RETURN(TpTransformerBlock l,
                              TpTransformerBlock::Create(0, 0, hidden, heads, o));
          auto act = std::make_shared<TpBlockActivations>();
          auto scratch = std::make_shared<TpScratch>();
          TpModule m;
          m.params = l.params("");
          m.forward = [=](UnitAccess& a, Communicator& tp, const float* x, float* y) {
            return l.Forward(a, tp, x, batch, seq, *act, *scratch, y);
          };
          m.backward = [=](UnitAccess& a, Communicator& tp, const float* x, const float* dy,
                           float* dx) { return l.Backward(a, tp, x, dy, *act, *scratch, dx); };
          return m;
        };
        return c;
      },
      51);
}

TEST(VocabParallelEmbeddingTest, MatchesEmbeddingWithAPaddedVocabulary) {
  const int64_t vocab = 11, dim = 5;  // padded to 12 at tp 2 and 4
  const std::vector<int32_t> ids = {3, 0, 10, 6, 3, 9, 1, 10};
  const int64_t rows = static_cast<int64_t>(ids.size());
  nn::Embedding emb(0, 0, vocab, dim);
  const std::vector<nn::ModuleParam> full_params = emb.params("wte.");
  DenseUnitAccess full(OneUnit(full_params), RandomInit(full_params, 3));
  const std::vector<float> table(full.ParamData(0, 0).begin(), full.ParamData(0, 0).end());
  const std::vector<float> dy = RandomVector(rows * dim, 4);
  std::vector<float> y_ref(rows * dim);
  ASSERT_TRUE(full.BeginForward(0).ok());
  emb.Forward(full, ids, y_ref.data());
  ASSERT_TRUE(full.EndForward(0).ok());
  ASSERT_TRUE(full.BeginBackward(0).ok());
  emb.Backward(full, ids, dy.data());
  ASSERT_TRUE(full.EndBackward(0).ok());
  const std::vector<float> g_ref(full.GradData(0, 0).begin(), full.GradData(0, 0).end());

  for (bool sp : {false, true}) {
    for (int tp : {1, 2, 4}) {
      SCOPED_TRACE("tp " + std::to_string(tp) + (sp ? " sp" : ""));
      std::vector<float> y(rows * dim), grad(vocab * dim, NAN);
      RunTp(tp, [&](int rank, Communicator& comm) -> Status {
        ZS_ASSIGN_OR_RETURN(
            VocabParallelEmbedding e,
            VocabParallelEmbedding::Create(0, 0, vocab, dim, TpOptions::Of(comm, sp)));
        EXPECT_EQ(e.padded_vocab(), tp == 1 ? 11 : 12);
        const std::vector<TpModuleParam> params = e.params("wte.");
        EXPECT_TRUE(params[0].spec.tensor_parallel);
        EXPECT_EQ(params[0].spec.shape, (std::vector<int64_t>{e.local_vocab(), dim}));
        DenseUnitAccess local(
            OneUnit({{params[0].spec, params[0].init}}),
            [&](int, int, std::span<float> v) { SliceFull(params[0].layout, rank, tp, table, v); });
        TpScratch scratch;
        std::vector<float> y_local(TpOptions::Of(comm, sp).local_rows(rows) * dim);
        ZS_RETURN_IF_ERROR(local.BeginForward(0));
        ZS_RETURN_IF_ERROR(e.Forward(local, comm, ids, scratch, y_local.data()));
        ZS_RETURN_IF_ERROR(local.EndForward(0));
        const std::vector<float> dy_local =
            TakePiece(sp ? Piece::kRowBlock : Piece::kAll, dy, rows, dim, rank, tp);
        ZS_RETURN_IF_ERROR(local.BeginBackward(0));
        ZS_RETURN_IF_ERROR(e.Backward(local, comm, ids, dy_local.data(), scratch));
        ZS_RETURN_IF_ERROR(local.EndBackward(0));
        if (sp || rank == 0) {
          PutPiece(sp ? Piece::kRowBlock : Piece::kAll, y_local, rows, dim, rank, tp, y);
        }
        PlaceLocal(params[0].layout, rank, tp, local.GradData(0, 0), grad);
        // The padded row (last rank at tp 2 and 4) stays zero and gets no gradient.
        const int64_t padded_local = e.vocab_start() + e.local_vocab() - vocab;
        for (int64_t i = 0; i < padded_local * dim; ++i) {
          EXPECT_EQ(local.ParamData(0, 0)[local.ParamData(0, 0).size() - 1 - i], 0.0f);
          EXPECT_EQ(local.GradData(0, 0)[local.GradData(0, 0).size() - 1 - i], 0.0f);
        }
        return OkStatus();
      });
      EXPECT_EQ(y, y_ref);  // one nonzero term per element: the sums are exact
      ExpectClose("wte grad", grad, g_ref, kRtol);
    }
  }
}

// ---- vocabulary-parallel cross-entropy -----------------------------------------------------

TEST(VocabParallelCrossEntropyTest, MatchesCrossEntropyAtEveryDegree) {
  const int64_t rows = 6, vocab = 13;
  std::vector<float> logits = RandomVector(rows * vocab, 71, 2.0f);
  logits[5] += 80.0f;  // a large logit: the log-sum-exp must stay finite
  const std::vector<int32_t> targets = {4, 0, 12, 7, 12, 1};
  std::vector<float> probs_ref(logits.size()), dlogits_ref(logits.size());
  const double loss_ref = nn::CrossEntropyForward(logits.data(), targets, vocab, probs_ref.data());
  nn::CrossEntropyBackward(probs_ref.data(), targets, vocab, 0.7f, dlogits_ref.data());
  for (int tp : {1, 2, 3, 4}) {  // 3 and 4 pad 13 to 15 and 16; at tp 4 the last shard is 1 + 3
    SCOPED_TRACE("tp " + std::to_string(tp));
    std::vector<double> losses(tp);
    std::vector<float> probs(logits.size(), NAN), dlogits(logits.size(), NAN);
    RunTp(tp, [&](int rank, Communicator& comm) -> Status {
      const VocabShard shard = VocabShard::Of(vocab, tp, rank);
      std::vector<float> local(rows * shard.size, 123.0f);  // padded columns hold garbage
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < shard.valid(); ++j) {
          local[r * shard.size + j] = logits[r * vocab + shard.start + j];
        }
      }
      ZS_ASSIGN_OR_RETURN(losses[rank], VocabParallelCrossEntropyForward(
                                            comm, local.data(), targets, shard, local.data()));
      std::vector<float> d(local.size());
      VocabParallelCrossEntropyBackward(local.data(), targets, shard, 0.7f, d.data());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < shard.size; ++j) {
          if (j >= shard.valid()) {  // padding: no probability, no gradient
            EXPECT_EQ(local[r * shard.size + j], 0.0f);
            EXPECT_EQ(d[r * shard.size + j], 0.0f);
            continue;
          }
          probs[r * vocab + shard.start + j] = local[r * shard.size + j];
          dlogits[r * vocab + shard.start + j] = d[r * shard.size + j];
        }
      }
      return OkStatus();
    });
    for (int r = 0; r < tp; ++r) EXPECT_EQ(losses[r], losses[0]) << "rank " << r;
    EXPECT_NEAR(losses[0], loss_ref, 1e-6 * std::abs(loss_ref));
    ExpectClose("probs", probs, probs_ref, kRtol);
    ExpectClose("dlogits", dlogits, dlogits_ref, kRtol);
  }
}

// Central differences of the loss in each rank's own logits, with every rank running every
// forward (the forward is collective): the ranks walk the same list of (rank, index) probes.
TEST(VocabParallelCrossEntropyTest, GradientMatchesFiniteDifferences) {
  const int64_t rows = 4, vocab = 7;  // padded to 8 at tp 2
  const int tp = 2;
  const std::vector<float> logits = RandomVector(rows * vocab, 81, 1.5f);
  const std::vector<int32_t> targets = {6, 0, 3, 4};
  RunTp(tp, [&](int rank, Communicator& comm) -> Status {
    const VocabShard shard = VocabShard::Of(vocab, tp, rank);
    std::vector<float> local(rows * shard.size, 0.0f), probs(local.size()), d(local.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < shard.valid(); ++j) {
        local[r * shard.size + j] = logits[r * vocab + shard.start + j];
      }
    }
    ZS_RETURN_IF_ERROR(
        VocabParallelCrossEntropyForward(comm, local.data(), targets, shard, probs.data())
            .status());
    VocabParallelCrossEntropyBackward(probs.data(), targets, shard, 1.0f, d.data());
    const float eps = 1e-2f;
    for (int owner = 0; owner < tp; ++owner) {  // the owner's columns: the same loop everywhere
      const int64_t owner_valid = VocabShard::Of(vocab, tp, owner).valid();
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < owner_valid; ++j) {
          const int64_t i = r * shard.size + j;
          double loss[2];
          for (int side = 0; side < 2; ++side) {
            const float saved = local[i];
            if (rank == owner) local[i] = saved + (side == 0 ? eps : -eps);
            ZS_ASSIGN_OR_RETURN(loss[side], VocabParallelCrossEntropyForward(
                                                comm, local.data(), targets, shard, probs.data()));
            local[i] = saved;
          }
          if (rank != owner) continue;
          const double numeric = (loss[0] - loss[1]) / (2.0 * eps);
          EXPECT_TRUE(nn::testing::Close(d[i], numeric, 2e-2, 2e-4))
              << "rank " << rank << " logit (" << r << ", " << shard.start + j << "): analytic "
              << d[i] << " numeric " << numeric;
        }
      }
    }
    return OkStatus();
  });
}

// ---- the mappings --------------------------------------------------------------------------

TEST(MappingsTest, ForwardAndBackwardOfEachMapping) {
  const int tp = 3;
  const int64_t local = 4;  // floats per rank's block
  RunTp(tp, [&](int rank, Communicator& comm) -> Status {
    auto value = [](int r, int64_t i) { return float(10 * r + i); };
    std::vector<float> mine(local), full(tp * local);
    for (int64_t i = 0; i < local; ++i) mine[i] = value(rank, i);
    // gather-from-sequence-region: forward all-gathers the blocks in rank order.
    ZS_RETURN_IF_ERROR(GatherFromSequenceRegionForward(comm, mine, full));
    for (int r = 0; r < tp; ++r) {
      for (int64_t i = 0; i < local; ++i) EXPECT_EQ(full[r * local + i], value(r, i));
    }
    // ... its backward reduce-scatters: block r is the sum over ranks of their block r.
    std::vector<float> dfull(tp * local), dlocal(local);
    for (int64_t i = 0; i < tp * local; ++i) dfull[i] = float(rank + 1) * float(i);
    ZS_RETURN_IF_ERROR(GatherFromSequenceRegionBackward(comm, dfull, dlocal));
    for (int64_t i = 0; i < local; ++i) EXPECT_EQ(dlocal[i], 6.0f * float(rank * local + i));
    // reduce-scatter-to-sequence-region: the same pair, reversed.
    ZS_RETURN_IF_ERROR(ReduceScatterToSequenceRegionForward(comm, dfull, dlocal));
    for (int64_t i = 0; i < local; ++i) EXPECT_EQ(dlocal[i], 6.0f * float(rank * local + i));
    ZS_RETURN_IF_ERROR(ReduceScatterToSequenceRegionBackward(comm, mine, full));
    for (int64_t i = 0; i < tp * local; ++i) EXPECT_EQ(full[i], value(i / local, i % local));
    // f backward and g forward: all-reduce sums in place.
    std::vector<float> v = {float(rank), 1.0f};
    ZS_RETURN_IF_ERROR(CopyToTpRegionBackward(comm, v));
    EXPECT_EQ(v, (std::vector<float>{3.0f, 3.0f}));
    ZS_RETURN_IF_ERROR(ReduceFromTpRegionForward(comm, v));
    EXPECT_EQ(v, (std::vector<float>{9.0f, 9.0f}));
    // Replicated gradients: summed over tp with sequence parallelism only.
    std::vector<float> g1 = {1.0f}, g2 = {1.0f, 1.0f};
    std::vector<float> partial = {1.0f, 2.0f, 3.0f};
    ZS_RETURN_IF_ERROR(AccumulateReplicatedGrads(comm, true, partial, {g1, g2}));
    EXPECT_EQ(g1, (std::vector<float>{4.0f}));
    EXPECT_EQ(g2, (std::vector<float>{7.0f, 10.0f}));
    partial = {1.0f, 2.0f, 3.0f};
    ZS_RETURN_IF_ERROR(AccumulateReplicatedGrads(comm, false, partial, {g1, g2}));
    EXPECT_EQ(g1, (std::vector<float>{5.0f}));
    // A full buffer that is not tp x the local one.
    std::vector<float> wrong(tp * local - 1);
    ExpectInvalidArgument(GatherFromSequenceRegionForward(comm, mine, wrong),
                          {"gather-from-sequence-region", "11", "tp 3", "'tp'"});
    return OkStatus();
  });
}

// ---- sizes the tp degree does not divide ---------------------------------------------------

TEST(TpLayerErrorsTest, SizesNotDivisibleByTpAreInvalidArguments) {
  const TpOptions tp4{.size = 4, .rank = 1};
  ExpectInvalidArgument(ColumnParallelLinear::Create(0, 0, 8, 10, tp4).status(),
                        {"column-parallel out 10", "tp 4"});
  ExpectInvalidArgument(
      ColumnParallelLinear::Create(0, 0, 8, 3 * 6, tp4, true, nn::InitKind::kNormal, 3).status(),
      {"out per block 6", "tp 4"});
  ExpectInvalidArgument(RowParallelLinear::Create(0, 0, 10, 8, tp4).status(),
                        {"row-parallel in 10", "tp 4"});
  ExpectInvalidArgument(TpAttention::Create(0, 0, 12, 3, TpOptions{.size = 2}).status(),
                        {"heads 3", "tp 2"});
  ExpectInvalidArgument(TpMlp::Create(0, 0, 3, TpOptions{.size = 8}).status(),
                        {"MLP width (4 * hidden) 12", "tp 8"});
  ExpectInvalidArgument(TpTransformerBlock::Create(0, 0, 12, 6, tp4).status(), {"heads 6", "tp 4"});
  ExpectInvalidArgument(TpOptions{.size = 2, .rank = 2}.Validate(), {"rank 2", "size 2"});
  ExpectInvalidArgument(TpOptions{.size = 4, .sequence_parallel = true}.CheckRows(6),
                        {"rows (batch * seq) 6", "tp 4"});
  EXPECT_TRUE(TpOptions{.size = 4}.CheckRows(6).ok());  // all rows on every rank: any count
}

TEST(TpLayerErrorsTest, SequenceParallelRowsNotDivisibleFailBeforeCommunicating) {
  const int64_t batch = 1, seq = 3, hidden = 8, heads = 2;  // rows 3 over tp 2
  RunTp(2, [&](int rank, Communicator& comm) -> Status {
    ZS_ASSIGN_OR_RETURN(TpTransformerBlock block,
                        TpTransformerBlock::Create(0, 0, hidden, heads, TpOptions::Of(comm, true)));
    std::vector<TpModuleParam> params = block.params("");
    ModelSpec spec;
    spec.units.push_back({"unit", {}});
    for (const TpModuleParam& p : params) spec.units[0].params.push_back(p.spec);
    DenseUnitAccess local(
        spec, [](int, int, std::span<float> v) { std::fill(v.begin(), v.end(), 0.5f); });
    std::vector<float> x(2 * hidden), y(2 * hidden);
    TpBlockActivations act;
    TpScratch scratch;
    ZS_RETURN_IF_ERROR(local.BeginForward(0));
    ExpectInvalidArgument(block.Forward(local, comm, x.data(), batch, seq, act, scratch, y.data()),
                          {"rows (batch * seq) 3", "tp 2"});
    ZS_RETURN_IF_ERROR(local.EndForward(0));
    (void)rank;
    return comm.Barrier();  // the group is still healthy: nothing was left half-done
  });
}

}  // namespace
}  // namespace zs::tp
