// The MoE MLP on one rank holding every expert: forward against a double-precision reference
// (k = 1 and 2, with and without capacity drops), backward against central finite differences
// of loss = sum(y * r) + aux (the aux loss alone through the router too), the tie rule, two
// micro-batches in flight, and the configuration errors.
#include "runtime/parallel/expert/moe_mlp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/runtime/parallel/expert/moe_test_support.h"

namespace zs {
namespace {

using testing::MakeModel;
using testing::MoeModel;
using testing::Random;
using testing::Reference;
using testing::ReferenceForward;

struct Case {
  int k;
  double capacity_factor;
  bool expect_drops;
};

std::string Name(const Case& c) {
  return "k=" + std::to_string(c.k) + " cf=" + std::to_string(c.capacity_factor);
}

MoeConfig SmallConfig(int k, double capacity_factor) {
  MoeConfig c;
  c.hidden = 6;
  c.ffn = 10;
  c.num_experts = 4;
  c.top_k = k;
  c.capacity_factor = capacity_factor;
  c.aux_loss_coef = 0.5f;  // large, so its gradient is well above float noise
  return c;
}

const Case kCases[] = {{1, 8.0, false}, {2, 8.0, false}, {1, 0.5, true}, {2, 0.6, true}};

Status RunForward(MoeModel& m, const std::vector<float>& x, int64_t T, std::vector<float>& y,
                  MoeActivations& act) {
  y.assign(x.size(), 0.0f);
  ZS_RETURN_IF_ERROR(m.access->BeginForward(0));
  ZS_RETURN_IF_ERROR(m.layer->Forward(*m.access, x.data(), T, y.data(), act));
  return m.access->EndForward(0);
}

Status RunBackward(MoeModel& m, const std::vector<float>& x, const std::vector<float>& dy,
                   std::vector<float>& dx, MoeActivations& act) {
  dx.assign(x.size(), 0.0f);
  ZS_RETURN_IF_ERROR(m.access->BeginBackward(0));
  ZS_RETURN_IF_ERROR(m.layer->Backward(*m.access, x.data(), dy.data(), dx.data(), act));
  return m.access->EndBackward(0);
}

TEST(MoeMlpTest, ForwardMatchesDoubleReference) {
  const int64_t T = 40;
  for (const Case& c : kCases) {
    const MoeConfig config = SmallConfig(c.k, c.capacity_factor);
    MoeModel m = MakeModel(config, nullptr, 5);
    const std::vector<float> x = Random(T * config.hidden, 17);
    std::vector<float> y;
    MoeActivations act;
    ASSERT_TRUE(RunForward(m, x, T, y, act).ok()) << Name(c);
    const Reference ref = ReferenceForward(*m.access, config, x, T);
    ASSERT_EQ(std::vector<int32_t>(act.expert_of().begin(), act.expert_of().end()), ref.expert_of)
        << Name(c);
    for (int64_t a = 0; a < T * c.k; ++a) {
      EXPECT_EQ(act.plan().slot[a] >= 0, bool(ref.kept[a])) << Name(c) << " assignment " << a;
    }
    EXPECT_EQ(act.plan().dropped() > 0, c.expect_drops) << Name(c);
    for (size_t i = 0; i < y.size(); ++i) {
      EXPECT_NEAR(y[i], ref.y[i], 1e-5 + 1e-5 * std::abs(ref.y[i])) << Name(c) << " y[" << i << "]";
    }
    EXPECT_NEAR(act.aux_loss(), ref.aux, 1e-6 * (1 + ref.aux)) << Name(c);
    if (c.expect_drops) {
      // A token whose every choice was dropped has y = 0 (the residual carries it).
      for (int64_t t = 0; t < T; ++t) {
        bool any = false;
        for (int j = 0; j < c.k; ++j) any = any || act.plan().slot[t * c.k + j] >= 0;
        if (any) continue;
        for (int64_t h = 0; h < config.hidden; ++h) EXPECT_EQ(y[t * config.hidden + h], 0.0f);
      }
    }
  }
}

// Central differences of loss = sum(y * r) * dy_weight + aux against the analytic gradients
// of one backward. A sample whose perturbation changes the routing or the drops (the loss is
// only piecewise smooth) is skipped; at most a few may be.
void CheckGradients(const Case& c, float dy_weight) {
  const int64_t T = 24;
  const MoeConfig config = SmallConfig(c.k, c.capacity_factor);
  MoeModel m = MakeModel(config, nullptr, 7);
  std::vector<float> x = Random(T * config.hidden, 19);
  std::vector<float> r = Random(T * config.hidden, 23);
  for (float& v : r) v *= dy_weight;
  std::vector<float> y, dx;
  MoeActivations base;
  ASSERT_TRUE(RunForward(m, x, T, y, base).ok());
  m.access->ZeroGrads();
  ASSERT_TRUE(RunBackward(m, x, r, dx, base).ok());
  const std::vector<int32_t> base_slot = base.plan().slot;
  const std::vector<int32_t> base_experts(base.expert_of().begin(), base.expert_of().end());

  int skipped = 0, checked = 0;
  auto loss = [&](bool* same_routing) {
    std::vector<float> yy;
    MoeActivations act;
    EXPECT_TRUE(RunForward(m, x, T, yy, act).ok());
    double l = act.aux_loss();
    for (size_t i = 0; i < yy.size(); ++i) l += double(yy[i]) * r[i];
    *same_routing =
        *same_routing && act.plan().slot == base_slot &&
        std::equal(act.expert_of().begin(), act.expert_of().end(), base_experts.begin());
    return l;
  };
  auto check = [&](const std::string& what, std::span<float> values,
                   std::span<const float> analytic) {
    const float eps = 1e-2f;
    const size_t n = values.size();
    for (size_t s = 0; s < std::min<size_t>(n, 16); ++s) {
      const size_t i = (s * n) / std::min<size_t>(n, 16) + (s * 5) % std::max<size_t>(1, n / 16);
      const float saved = values[i];
      bool same = true;
      values[i] = saved + eps;
      const double plus = loss(&same);
      values[i] = saved - eps;
      const double minus = loss(&same);
      values[i] = saved;
      if (!same) {
        ++skipped;
        continue;
      }
      ++checked;
      const double numeric = (plus - minus) / (2.0 * eps);
      EXPECT_NEAR(analytic[i], numeric, 3e-3 + 2e-2 * std::abs(numeric))
          << Name(c) << " dy_weight=" << dy_weight << " " << what << "[" << i << "]";
    }
  };
  for (int p = 0; p < m.layer->num_params(); ++p) {
    if (dy_weight == 0 && p > 0) break;  // aux only: experts get no gradient
    check(m.layer->params()[p].spec.name, m.access->ParamData(0, p), m.access->GradData(0, p));
  }
  check("x", x, dx);
  EXPECT_LE(skipped, checked / 8 + 1) << Name(c) << ": too many samples changed the routing";
  if (dy_weight == 0) {
    for (int p = 1; p < m.layer->num_params(); ++p) {
      for (float g : m.access->GradData(0, p)) ASSERT_EQ(g, 0.0f);
    }
  }
}

TEST(MoeMlpTest, BackwardMatchesFiniteDifferences) {
  for (const Case& c : kCases) CheckGradients(c, 1.0f);
}

TEST(MoeMlpTest, AuxLossGradientReachesRouterAndInput) {
  for (const Case& c : kCases) CheckGradients(c, 0.0f);
}

TEST(MoeMlpTest, AuxLossGradientIsSeededWithBackwardScale) {
  const MoeConfig config = SmallConfig(2, 8.0);
  const int64_t T = 16;
  std::vector<float> grads[2];
  for (int i = 0; i < 2; ++i) {
    MoeModel m = MakeModel(config, nullptr, 3);
    m.access->set_backward_scale(i == 0 ? 1.0f : 0.25f);
    const std::vector<float> x = Random(T * config.hidden, 4);
    const std::vector<float> zero(x.size(), 0.0f);
    std::vector<float> y, dx;
    MoeActivations act;
    ASSERT_TRUE(RunForward(m, x, T, y, act).ok());
    ASSERT_TRUE(RunBackward(m, x, zero, dx, act).ok());
    std::span<const float> g = m.access->GradData(0, 0);
    grads[i].assign(g.begin(), g.end());
  }
  for (size_t i = 0; i < grads[0].size(); ++i) {
    EXPECT_NEAR(grads[1][i], 0.25f * grads[0][i], 1e-7 + 1e-6 * std::abs(grads[0][i]));
  }
}

TEST(MoeMlpTest, TiesGoToTheLowerExpert) {
  // A zero router: every prob is 1/E, so every token picks experts 0 and 1 with gates 1/2, and
  // capacity ceil(2 * 8 * 1.0 / 4) = 4 keeps tokens 0..3's first choices on expert 0 and
  // tokens 0..3's second choices on expert 1.
  MoeConfig config = SmallConfig(2, 1.0);
  MoeModel m = MakeModel(config, nullptr, 3);
  for (float& w : m.access->ParamData(0, 0)) w = 0.0f;
  const int64_t T = 8;
  const std::vector<float> x = Random(T * config.hidden, 4);
  std::vector<float> y;
  MoeActivations act;
  ASSERT_TRUE(RunForward(m, x, T, y, act).ok());
  for (int64_t t = 0; t < T; ++t) {
    EXPECT_EQ(act.expert_of()[t * 2], 0);
    EXPECT_EQ(act.expert_of()[t * 2 + 1], 1);
    EXPECT_FLOAT_EQ(act.gates()[t * 2], 0.5f);
    EXPECT_EQ(act.plan().slot[t * 2] >= 0, t < 4) << t;
    EXPECT_EQ(act.plan().slot[t * 2 + 1] >= 0, t < 4) << t;
  }
  // f = (1, 0, 0, 0), P = (1/4, ...): aux = coef * E * 1/4 = coef.
  EXPECT_FLOAT_EQ(act.aux_loss(), config.aux_loss_coef);
}

TEST(MoeMlpTest, MicroBatchesInFlightMatchOneAtATime) {
  const MoeConfig config = SmallConfig(2, 0.8);
  const int64_t T = 20;
  const std::vector<float> x1 = Random(T * config.hidden, 31), x2 = Random(T * config.hidden, 32);
  const std::vector<float> r1 = Random(T * config.hidden, 33), r2 = Random(T * config.hidden, 34);
  std::vector<float> grads[2], dxs[2];
  for (int order = 0; order < 2; ++order) {
    MoeModel m = MakeModel(config, nullptr, 9);
    std::vector<float> y1, y2, dx1, dx2;
    MoeActivations a1, a2;
    if (order == 0) {  // f1 b1 f2 b2
      ASSERT_TRUE(RunForward(m, x1, T, y1, a1).ok());
      ASSERT_TRUE(RunBackward(m, x1, r1, dx1, a1).ok());
      ASSERT_TRUE(RunForward(m, x2, T, y2, a2).ok());
      ASSERT_TRUE(RunBackward(m, x2, r2, dx2, a2).ok());
    } else {  // f1 f2 b2 b1
      ASSERT_TRUE(RunForward(m, x1, T, y1, a1).ok());
      ASSERT_TRUE(RunForward(m, x2, T, y2, a2).ok());
      ASSERT_TRUE(RunBackward(m, x2, r2, dx2, a2).ok());
      ASSERT_TRUE(RunBackward(m, x1, r1, dx1, a1).ok());
    }
    std::span<const float> g = m.access->UnitGrads(0);
    grads[order].assign(g.begin(), g.end());
    dxs[order] = dx1;
    dxs[order].insert(dxs[order].end(), dx2.begin(), dx2.end());
  }
  EXPECT_EQ(dxs[0], dxs[1]);
  for (size_t i = 0; i < grads[0].size(); ++i) {
    EXPECT_NEAR(grads[0][i], grads[1][i], 1e-6 + 1e-5 * std::abs(grads[0][i])) << i;
  }
}

TEST(MoeMlpTest, ParameterNames) {
  const MoeConfig config = SmallConfig(2, 1.0);
  StatusOr<MoeMlp> layer = MoeMlp::Create(0, 0, config, nullptr);
  ASSERT_TRUE(layer.ok());
  const std::vector<nn::ModuleParam> params = layer->params();
  ASSERT_EQ(int(params.size()), layer->num_params());
  ASSERT_EQ(params.size(), 17u);
  EXPECT_EQ(params[0].spec.name, "moe.router.weight");
  EXPECT_EQ(params[0].spec.shape, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(params[5].spec.name, "moe.experts.1.fc.weight");
  EXPECT_EQ(params[5].spec.shape, (std::vector<int64_t>{10, 6}));
  EXPECT_EQ(params[6].spec.name, "moe.experts.1.fc.bias");
  EXPECT_FALSE(params[6].spec.weight_decay);
  EXPECT_EQ(params[7].spec.name, "moe.experts.1.proj.weight");
  EXPECT_EQ(params[7].spec.shape, (std::vector<int64_t>{6, 10}));
  EXPECT_EQ(params[16].spec.name, "moe.experts.3.proj.bias");
}

TEST(MoeMlpTest, ConfigErrors) {
  auto expect_invalid = [](const MoeConfig& c, int ep_size, const std::string& needle) {
    const Status s = ValidateMoeConfig(c, ep_size);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
  };
  MoeConfig c = SmallConfig(2, 1.0);
  EXPECT_TRUE(ValidateMoeConfig(c, 1).ok());
  EXPECT_TRUE(ValidateMoeConfig(c, 4).ok());
  expect_invalid(c, 3, "E=4 is not divisible by the expert-parallel size n=3");
  c.top_k = 3;
  expect_invalid(c, 1, "top_k=3");
  c.top_k = 0;
  expect_invalid(c, 1, "top_k=0");
  c = SmallConfig(1, 0.0);
  expect_invalid(c, 1, "capacity_factor=0");
  c = SmallConfig(1, -1.5);
  expect_invalid(c, 1, "capacity_factor=-1.5");
  c = SmallConfig(1, std::nan(""));
  expect_invalid(c, 1, "capacity_factor=nan");
  c = SmallConfig(2, 1.0);
  c.num_experts = 1;
  expect_invalid(c, 1, "num_experts=1 must be >= 1 and >= top_k=2");
  c = SmallConfig(2, 1.0);
  c.ffn = 0;
  expect_invalid(c, 1, "ffn=0");
  c = SmallConfig(2, 1.0);
  c.aux_loss_coef = -1;
  expect_invalid(c, 1, "aux_loss_coef=-1");
  // Create returns the same errors.
  c = SmallConfig(2, 1.0);
  c.top_k = 3;
  EXPECT_EQ(MoeMlp::Create(0, 0, c, nullptr).status().code(), StatusCode::kInvalidArgument);
}

TEST(MoeMlpTest, Capacity) {
  MoeConfig c = SmallConfig(2, 1.25);
  EXPECT_EQ(ExpertCapacity(c, 0), 0);
  EXPECT_EQ(ExpertCapacity(c, 10), 7);  // ceil(2 * 10 * 1.25 / 4) = ceil(6.25)
  c.capacity_factor = 1.1;
  c.num_experts = 2;
  EXPECT_EQ(ExpertCapacity(c, 10), 11);  // 2 * 10 * 1.1 / 2 = 11.000000000000002 counts as 11
  c.top_k = 1;
  c.capacity_factor = 1.0;
  c.num_experts = 4;
  EXPECT_EQ(ExpertCapacity(c, 8), 2);
  EXPECT_EQ(ExpertCapacity(c, 9), 3);
  c.capacity_factor = 1e300;
  EXPECT_EQ(ExpertCapacity(c, 9), 9);  // clamped to k * T
}

}  // namespace
}  // namespace zs
