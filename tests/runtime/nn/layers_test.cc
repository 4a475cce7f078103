// Each layer: forward against a double-precision reference written from the formula, and
// backward (input and parameter gradients) against central finite differences of
// loss = sum(y * r) for a random r (so dy = r). Sizes are odd on purpose.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>
#include <vector>

#include "runtime/model/dense_unit_access.h"
#include "runtime/nn/causal_self_attention.h"
#include "runtime/nn/cross_entropy.h"
#include "runtime/nn/embedding.h"
#include "runtime/nn/gelu.h"
#include "runtime/nn/layer_norm.h"
#include "runtime/nn/linear.h"
#include "runtime/nn/mlp.h"
#include "runtime/nn/transformer_block.h"
#include "tests/runtime/nn/grad_check.h"

namespace zs::nn {
namespace {

using testing::CheckFiniteDifferences;
using testing::Close;
using testing::OneUnit;
using testing::RandomInit;
using testing::RandomVector;
using Vec = std::vector<double>;

// ---- double-precision references ----------------------------------------------------------

std::span<const float> P(DenseUnitAccess& a, int p) { return a.ParamData(0, p); }

Vec RefLinear(const Vec& x, int64_t rows, int64_t in, int64_t out, std::span<const float> w,
              std::span<const float> b) {
  Vec y(rows * out);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  }
  return y;
}

Vec RefLayerNorm(const Vec& x, int64_t rows, int64_t dim, std::span<const float> g,
                 std::span<const float> b) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < dim; ++j) mean += x[r * dim + j] / dim;
    for (int64_t j = 0; j < dim; ++j)
      var += (x[r * dim + j] - mean) * (x[r * dim + j] - mean) / dim;
    for (int64_t j = 0; j < dim; ++j) {
      y[r * dim + j] = (x[r * dim + j] - mean) / std::sqrt(var + 1e-5) * g[j] + b[j];
    }
  }
  return y;
}

double RefGelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

// Params at `first`: qkv.weight, qkv.bias, proj.weight, proj.bias.
Vec RefAttention(DenseUnitAccess& a, int first, const Vec& x, int64_t batch, int64_t seq, int64_t h,
                 int64_t heads) {
  const int64_t d = h / heads, rows = batch * seq;
  const Vec qkv = RefLinear(x, rows, h, 3 * h, P(a, first), P(a, first + 1));
  Vec ctx(rows * h, 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t hd = 0; hd < heads; ++hd) {
      for (int64_t i = 0; i < seq; ++i) {
        auto at = [&](int64_t t, int64_t part, int64_t k) {
          return qkv[(b * seq + t) * 3 * h + part * h + hd * d + k];
        };
        Vec score(i + 1);
        double max = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t k = 0; k < d; ++k) s += at(i, 0, k) * at(j, 1, k);
          score[j] = s / std::sqrt(double(d));
          max = std::max(max, score[j]);
        }
        for (double& s : score) sum += (s = std::exp(s - max));
        for (int64_t k = 0; k < d; ++k) {
          double c = 0;
          for (int64_t j = 0; j <= i; ++j) c += score[j] / sum * at(j, 2, k);
          ctx[(b * seq + i) * h + hd * d + k] = c;
        }
      }
    }
  }
  return RefLinear(ctx, rows, h, h, P(a, first + 2), P(a, first + 3));
}

Vec RefMlp(DenseUnitAccess& a, int first, const Vec& x, int64_t rows, int64_t h) {
  Vec hidden = RefLinear(x, rows, h, 4 * h, P(a, first), P(a, first + 1));
  for (double& v : hidden) v = RefGelu(v);
  return RefLinear(hidden, rows, 4 * h, h, P(a, first + 2), P(a, first + 3));
}

Vec RefBlock(DenseUnitAccess& a, const Vec& x, int64_t batch, int64_t seq, int64_t h,
             int64_t heads) {
  const int64_t rows = batch * seq;
  const Vec att =
      RefAttention(a, 2, RefLayerNorm(x, rows, h, P(a, 0), P(a, 1)), batch, seq, h, heads);
  Vec x1(x.size());
  for (size_t i = 0; i < x.size(); ++i) x1[i] = x[i] + att[i];
  const Vec m = RefMlp(a, 8, RefLayerNorm(x1, rows, h, P(a, 6), P(a, 7)), rows, h);
  for (size_t i = 0; i < x.size(); ++i) x1[i] += m[i];
  return x1;
}

// ---- the harness ---------------------------------------------------------------------------

struct ModuleUnderTest {
  std::vector<ModuleParam> params;
  int64_t x_size = 0;
  int64_t y_size = 0;
  std::function<void(UnitAccess&, const float* x, float* y)> forward;
  std::function<void(UnitAccess&, const float* x, const float* dy, float* dx)> backward;
  std::function<Vec(DenseUnitAccess&, const Vec& x)> reference;
};

void CheckModule(const ModuleUnderTest& m, uint64_t seed) {
  DenseUnitAccess access(OneUnit(m.params), RandomInit(m.params, seed));
  std::vector<float> x = RandomVector(m.x_size, seed + 1);
  const std::vector<float> r = RandomVector(m.y_size, seed + 2);
  std::vector<float> y(m.y_size), dx(m.x_size);

  auto forward = [&] {
    EXPECT_TRUE(access.BeginForward(0).ok());
    m.forward(access, x.data(), y.data());
    EXPECT_TRUE(access.EndForward(0).ok());
  };
  forward();
  const Vec expected = m.reference(access, Vec(x.begin(), x.end()));
  ASSERT_EQ(expected.size(), y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_TRUE(Close(y[i], expected[i], 1e-4, 1e-5))
        << "y[" << i << "] " << y[i] << " vs " << expected[i];
  }

  ASSERT_TRUE(access.BeginBackward(0).ok());
  m.backward(access, x.data(), r.data(), dx.data());
  ASSERT_TRUE(access.EndBackward(0).ok());
  std::vector<std::vector<float>> grads;
  for (size_t p = 0; p < m.params.size(); ++p) {
    std::span<float> g = access.GradData(0, int(p));
    grads.emplace_back(g.begin(), g.end());
  }
  // A second backward accumulates: gradients double (dx is overwritten, not accumulated).
  // Near, not equal: some gradients are zero up to rounding (the key bias under softmax).
  forward();
  std::vector<float> dx2(m.x_size);
  ASSERT_TRUE(access.BeginBackward(0).ok());
  m.backward(access, x.data(), r.data(), dx2.data());
  ASSERT_TRUE(access.EndBackward(0).ok());
  EXPECT_EQ(dx2, dx);
  for (size_t p = 0; p < m.params.size(); ++p) {
    for (size_t i = 0; i < grads[p].size(); ++i) {
      const float g = grads[p][i];
      ASSERT_NEAR(access.GradData(0, int(p))[i], 2 * g, 1e-6f + 1e-5f * std::abs(g))
          << m.params[p].spec.name;
    }
  }

  auto loss = [&] {
    forward();
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += double(y[i]) * r[i];
    return s;
  };
  CheckFiniteDifferences("dx", x, dx, loss);
  for (size_t p = 0; p < m.params.size(); ++p) {
    CheckFiniteDifferences(m.params[p].spec.name, access.ParamData(0, int(p)), grads[p], loss);
  }
}

// ---- the layers ----------------------------------------------------------------------------

TEST(LinearTest, ForwardAndGradients) {
  for (bool bias : {true, false}) {
    const int64_t rows = 5, in = 7, out = 9;
    Linear linear(0, 0, in, out, bias);
    ModuleUnderTest m;
    m.params = linear.params("fc.");
    m.x_size = rows * in;
    m.y_size = rows * out;
    m.forward = [&](UnitAccess& a, const float* x, float* y) { linear.Forward(a, x, rows, y); };
    m.backward = [&](UnitAccess& a, const float* x, const float* dy, float* dx) {
      linear.Backward(a, x, dy, rows, dx);
    };
    m.reference = [&](DenseUnitAccess& a, const Vec& x) {
      return RefLinear(x, rows, in, out, P(a, 0), bias ? P(a, 1) : std::span<const float>());
    };
    CheckModule(m, 11);
  }
}

TEST(LinearTest, ParamMetadata) {
  Linear linear(3, 4, 5, 6);
  const std::vector<ModuleParam> p = linear.params("mlp.fc.");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].spec.name, "mlp.fc.weight");
  EXPECT_EQ(p[0].spec.shape, (std::vector<int64_t>{6, 5}));
  EXPECT_TRUE(p[0].spec.weight_decay);
  EXPECT_EQ(p[1].spec.name, "mlp.fc.bias");
  EXPECT_EQ(p[1].spec.shape, (std::vector<int64_t>{6}));
  EXPECT_FALSE(p[1].spec.weight_decay);
  EXPECT_EQ(p[1].init, InitKind::kZeros);
}

TEST(LayerNormTest, ForwardAndGradients) {
  const int64_t rows = 3, dim = 13;
  LayerNorm ln(0, 0, dim);
  std::vector<float> mean(rows), rstd(rows);
  ModuleUnderTest m;
  m.params = ln.params("ln.");
  EXPECT_FALSE(m.params[0].spec.weight_decay);
  EXPECT_FALSE(m.params[1].spec.weight_decay);
  EXPECT_EQ(m.params[0].init, InitKind::kOnes);
  m.x_size = m.y_size = rows * dim;
  m.forward = [&](UnitAccess& a, const float* x, float* y) {
    ln.Forward(a, x, rows, y, mean.data(), rstd.data());
  };
  m.backward = [&](UnitAccess& a, const float* x, const float* dy, float* dx) {
    ln.Backward(a, x, mean.data(), rstd.data(), dy, rows, dx);
  };
  m.reference = [&](DenseUnitAccess& a, const Vec& x) {
    return RefLayerNorm(x, rows, dim, P(a, 0), P(a, 1));
  };
  CheckModule(m, 21);
}

TEST(GeluTest, ForwardAndGradients) {
  const int64_t n = 37;
  ModuleUnderTest m;
  m.x_size = m.y_size = n;
  m.forward = [&](UnitAccess&, const float* x, float* y) { GeluForward(x, n, y); };
  m.backward = [&](UnitAccess&, const float* x, const float* dy, float* dx) {
    GeluBackward(x, dy, n, dx);
  };
  m.reference = [&](DenseUnitAccess&, const Vec& x) {
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = RefGelu(x[i]);
    return y;
  };
  CheckModule(m, 31);
}

TEST(CausalSelfAttentionTest, ForwardAndGradients) {
  const int64_t batch = 2, seq = 5, h = 9, heads = 3;
  CausalSelfAttention attn(0, 0, h, heads);
  ModuleUnderTest m;
  m.params = attn.params("attn.");
  ASSERT_EQ(m.params.size(), 4u);
  EXPECT_EQ(m.params[0].spec.shape, (std::vector<int64_t>{3 * h, h}));
  EXPECT_EQ(m.params[2].init, InitKind::kNormalResidual);
  m.x_size = m.y_size = batch * seq * h;
  m.forward = [&](UnitAccess& a, const float* x, float* y) { attn.Forward(a, x, batch, seq, y); };
  m.backward = [&](UnitAccess& a, const float* x, const float* dy, float* dx) {
    attn.Backward(a, x, dy, dx);
  };
  m.reference = [&](DenseUnitAccess& a, const Vec& x) {
    return RefAttention(a, 0, x, batch, seq, h, heads);
  };
  CheckModule(m, 41);
}

TEST(CausalSelfAttentionTest, OutputDoesNotDependOnLaterPositions) {
  const int64_t seq = 7, h = 6, heads = 2;
  CausalSelfAttention attn(0, 0, h, heads);
  const std::vector<ModuleParam> params = attn.params("");
  DenseUnitAccess access(OneUnit(params), RandomInit(params, 5));
  std::vector<float> x = RandomVector(seq * h, 6);
  std::vector<float> y1(seq * h), y2(seq * h);
  ASSERT_TRUE(access.BeginForward(0).ok());
  attn.Forward(access, x.data(), 1, seq, y1.data());
  for (int64_t j = 0; j < h; ++j) x[(seq - 1) * h + j] += 3.0f;  // change the last position
  attn.Forward(access, x.data(), 1, seq, y2.data());
  ASSERT_TRUE(access.EndForward(0).ok());
  for (int64_t i = 0; i < (seq - 1) * h; ++i) EXPECT_EQ(y1[i], y2[i]) << i;
  bool last_changed = false;
  for (int64_t j = 0; j < h; ++j) last_changed |= y1[(seq - 1) * h + j] != y2[(seq - 1) * h + j];
  EXPECT_TRUE(last_changed);
}

TEST(MlpTest, ForwardAndGradients) {
  const int64_t rows = 5, h = 7;
  Mlp mlp(0, 0, h);
  ModuleUnderTest m;
  m.params = mlp.params("mlp.");
  m.x_size = m.y_size = rows * h;
  m.forward = [&](UnitAccess& a, const float* x, float* y) { mlp.Forward(a, x, rows, y); };
  m.backward = [&](UnitAccess& a, const float* x, const float* dy, float* dx) {
    mlp.Backward(a, x, dy, dx);
  };
  m.reference = [&](DenseUnitAccess& a, const Vec& x) { return RefMlp(a, 0, x, rows, h); };
  CheckModule(m, 51);
}

TEST(TransformerBlockTest, ForwardAndGradients) {
  const int64_t batch = 2, seq = 3, h = 9, heads = 3;
  TransformerBlock block(0, 0, h, heads);
  ModuleUnderTest m;
  m.params = block.params("");
  ASSERT_EQ(m.params.size(), 12u);
  ASSERT_EQ(block.num_params(), 12);
  EXPECT_EQ(m.params[0].spec.name, "ln1.weight");
  EXPECT_EQ(m.params[5].spec.name, "attn.proj.bias");
  EXPECT_EQ(m.params[11].spec.name, "mlp.proj.bias");
  m.x_size = m.y_size = batch * seq * h;
  m.forward = [&](UnitAccess& a, const float* x, float* y) { block.Forward(a, x, batch, seq, y); };
  m.backward = [&](UnitAccess& a, const float* x, const float* dy, float* dx) {
    block.Backward(a, x, dy, dx);
  };
  m.reference = [&](DenseUnitAccess& a, const Vec& x) {
    return RefBlock(a, x, batch, seq, h, heads);
  };
  CheckModule(m, 61);
}

TEST(EmbeddingTest, LookupAndScatterAdd) {
  const int64_t num = 7, dim = 5;
  Embedding emb(0, 0, num, dim);
  const std::vector<ModuleParam> params = emb.params("wte.");
  EXPECT_TRUE(params[0].spec.weight_decay);
  DenseUnitAccess access(OneUnit(params), RandomInit(params, 3));
  const std::vector<int32_t> ids = {3, 0, 3, 6, 3};
  std::vector<float> y(ids.size() * dim, 1.0f);
  const std::vector<float> dy = RandomVector(ids.size() * dim, 4);
  ASSERT_TRUE(access.BeginForward(0).ok());
  emb.Forward(access, ids, y.data(), /*accumulate=*/true);
  ASSERT_TRUE(access.EndForward(0).ok());
  std::span<float> table = access.ParamData(0, 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t j = 0; j < dim; ++j) EXPECT_EQ(y[i * dim + j], 1.0f + table[ids[i] * dim + j]);
  }
  ASSERT_TRUE(access.BeginBackward(0).ok());
  emb.Backward(access, ids, dy.data());
  ASSERT_TRUE(access.EndBackward(0).ok());
  std::span<float> grad = access.GradData(0, 0);
  for (int64_t row = 0; row < num; ++row) {
    for (int64_t j = 0; j < dim; ++j) {
      double expected = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] == row) expected += dy[i * dim + j];
      }
      EXPECT_NEAR(grad[row * dim + j], expected, 1e-6) << row << "," << j;
    }
  }
}

TEST(CrossEntropyTest, LossAndGradient) {
  const int64_t rows = 3, vocab = 11;
  std::vector<float> logits = RandomVector(rows * vocab, 71, 2.0f);
  logits[5] += 80.0f;  // a large logit: the log-sum-exp must stay finite
  const std::vector<int32_t> targets = {4, 0, 10};
  auto reference = [&] {
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double max = -1e300, sum = 0;
      for (int64_t j = 0; j < vocab; ++j) max = std::max<double>(max, logits[r * vocab + j]);
      for (int64_t j = 0; j < vocab; ++j) sum += std::exp(logits[r * vocab + j] - max);
      total += max + std::log(sum) - logits[r * vocab + targets[r]];
    }
    return total / rows;
  };
  std::vector<float> probs(rows * vocab);
  const double loss = CrossEntropyForward(logits.data(), targets, vocab, probs.data());
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, reference(), 1e-5);
  std::vector<float> dlogits(rows * vocab);
  const float seed = 0.7f;
  CrossEntropyBackward(probs.data(), targets, vocab, seed, dlogits.data());
  std::vector<float> scaled(dlogits.size());
  for (size_t i = 0; i < scaled.size(); ++i) scaled[i] = dlogits[i] / seed;
  CheckFiniteDifferences("dlogits", logits, scaled, reference, 1e-2f, 1e-2, 1e-4, 40);
  // In place: probs over the logits, then dlogits over the probs.
  std::vector<float> inplace = logits;
  EXPECT_EQ(CrossEntropyForward(inplace.data(), targets, vocab, inplace.data()), loss);
  CrossEntropyBackward(inplace.data(), targets, vocab, seed, inplace.data());
  EXPECT_EQ(inplace, dlogits);
}

}  // namespace
}  // namespace zs::nn
