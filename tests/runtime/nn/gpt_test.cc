// The GPT model: spec and init, the bracket order, the full gradient against finite
// differences (every unit, including the tied wte), loss at init, SGD, determinism, errors.
#include "runtime/nn/gpt.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "runtime/device/memory_tracker.h"
#include "runtime/model/dense_unit_access.h"
#include "tests/runtime/nn/grad_check.h"

namespace zs::nn {
namespace {

using Event = DenseUnitAccess::Event;

GptConfig Tiny() {
  return GptConfig{.vocab = 11, .max_seq = 5, .layers = 2, .hidden = 12, .heads = 3};
}

std::unique_ptr<Gpt> MakeGpt(const GptConfig& config, MemoryTracker* tracker = nullptr) {
  StatusOr<std::unique_ptr<Gpt>> gpt = Gpt::Create(config, tracker);
  EXPECT_TRUE(gpt.ok()) << gpt.status().ToString();
  return std::move(gpt).value();
}

// Tokens and next-token targets from a fixed pseudo-random stream.
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

TEST(GptTest, SpecUnitsAndMetadata) {
  auto gpt = MakeGpt(Tiny());
  const ModelSpec& spec = gpt->spec();
  ASSERT_TRUE(spec.Validate().ok());
  ASSERT_EQ(spec.units.size(), 4u);
  EXPECT_EQ(spec.units[0].name, "embed");
  EXPECT_EQ(spec.units[1].name, "block.0");
  EXPECT_EQ(spec.units[2].name, "block.1");
  EXPECT_EQ(spec.units[3].name, "head");
  EXPECT_EQ(gpt->head_unit(), 3);
  EXPECT_EQ(gpt->block_unit(1), 2);
  ASSERT_EQ(spec.units[0].params.size(), 2u);
  EXPECT_EQ(spec.units[0].params[0].shape, (std::vector<int64_t>{11, 12}));
  EXPECT_EQ(spec.units[0].params[1].shape, (std::vector<int64_t>{5, 12}));
  EXPECT_TRUE(spec.units[0].params[0].weight_decay);
  ASSERT_EQ(spec.units[3].params.size(), 2u);
  EXPECT_FALSE(spec.units[3].params[0].weight_decay);
  EXPECT_FALSE(spec.units[3].params[1].weight_decay);
  for (const ParamSpec& p : spec.units[1].params) {
    EXPECT_EQ(p.weight_decay, p.shape.size() == 2) << p.name;  // matrices yes, vectors no
  }
  const int64_t h = 12, per_block = 4 * h + 3 * h * h + 3 * h + h * h + h + 4 * h * h + 4 * h +
                                    4 * h * h + h;
  EXPECT_EQ(spec.numel(), 11 * h + 5 * h + 2 * per_block + 2 * h);
}

TEST(GptTest, InitFollowsGpt2AndDependsOnlyOnSeedUnitParam) {
  GptConfig config{.vocab = 64, .max_seq = 16, .layers = 3, .hidden = 48, .heads = 4};
  auto gpt = MakeGpt(config);
  DenseUnitAccess access(gpt->spec(), gpt->Init(7));
  auto stddev = [](std::span<const float> v) {
    double s = 0, s2 = 0;
    for (float x : v) s += x, s2 += double(x) * x;
    return std::sqrt(s2 / v.size() - (s / v.size()) * (s / v.size()));
  };
  EXPECT_NEAR(stddev(access.ParamData(0, 0)), 0.02, 0.002);  // wte
  const ModelSpec& spec = gpt->spec();
  for (size_t p = 0; p < spec.units[1].params.size(); ++p) {
    const std::string& name = spec.units[1].params[p].name;
    std::span<const float> v = access.ParamData(1, int(p));
    if (name == "attn.proj.weight" || name == "mlp.proj.weight") {
      EXPECT_NEAR(stddev(v), 0.02 / std::sqrt(6.0), 0.002) << name;
    } else if (name == "ln1.weight" || name == "ln2.weight") {
      for (float x : v) ASSERT_EQ(x, 1.0f) << name;
    } else if (name.ends_with("bias")) {
      for (float x : v) ASSERT_EQ(x, 0.0f) << name;
    } else {
      EXPECT_NEAR(stddev(v), 0.02, 0.002) << name;
    }
  }
  // Same (seed, unit, param): same bits, whatever else is filled or in which order.
  ParamInit init = gpt->Init(7);
  std::vector<float> again(access.ParamData(2, 2).size());
  init(2, 2, again);
  EXPECT_EQ(std::memcmp(again.data(), access.ParamData(2, 2).data(), again.size() * 4), 0);
  gpt->Init(8)(2, 2, again);
  EXPECT_NE(std::memcmp(again.data(), access.ParamData(2, 2).data(), again.size() * 4), 0);
  // Different blocks draw different values.
  EXPECT_NE(std::memcmp(access.ParamData(1, 2).data(), access.ParamData(2, 2).data(), 64), 0);
}

TEST(GptTest, BracketOrderAndLossAtInit) {
  auto gpt = MakeGpt(Tiny());
  DenseUnitAccess access(gpt->spec(), gpt->Init(1));
  const Batch b = MakeBatch(11, 3, 5, 9);
  StatusOr<float> loss = gpt->ForwardBackward(access, b.tokens, b.targets, 3, 5);
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  EXPECT_NEAR(*loss, std::log(11.0), 0.05);
  const std::vector<Event> expected = {
      {Event::kBeginForward, 0},  {Event::kEndForward, 0},    {Event::kBeginForward, 1},
      {Event::kEndForward, 1},    {Event::kBeginForward, 2},  {Event::kEndForward, 2},
      {Event::kBeginForward, 3},  {Event::kBeginForward, 0},  {Event::kEndForward, 0},
      {Event::kEndForward, 3},    {Event::kBeginBackward, 3}, {Event::kBeginBackward, 0},
      {Event::kEndBackward, 0},   {Event::kEndBackward, 3},   {Event::kBeginBackward, 2},
      {Event::kEndBackward, 2},   {Event::kBeginBackward, 1}, {Event::kEndBackward, 1},
      {Event::kBeginBackward, 0}, {Event::kEndBackward, 0}};
  EXPECT_EQ(access.trace(), expected);
  EXPECT_TRUE(access.idle());
  for (int u = 0; u < 4; ++u) EXPECT_EQ(access.pending_backward(u), 0) << u;

  // Forward only: the forward half.
  access.ClearTrace();
  StatusOr<float> eval = gpt->Forward(access, b.tokens, b.targets, 3, 5);
  ASSERT_TRUE(eval.ok());
  EXPECT_EQ(*eval, *loss);
  EXPECT_EQ(access.trace(), std::vector<Event>(expected.begin(), expected.begin() + 10));
  // Probabilities rows sum to one.
  double sum = 0;
  for (int j = 0; j < 11; ++j) sum += gpt->probabilities()[j];
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

// Perturbed parameters (not GPT-2's tiny init) so every gradient is well above float noise.
ParamInit LargeInit(const Gpt& gpt) {
  return [spec = gpt.spec()](int unit, int param, std::span<float> values) {
    const ParamSpec& p = spec.units[unit].params[param];
    FillNormal(99, unit, param, p.shape.size() == 2 ? 0.3f : 0.2f, values);
    if (p.name.ends_with("weight") && p.shape.size() == 1) {
      for (float& v : values) v += 1.0f;  // LayerNorm gains
    }
  };
}

TEST(GptTest, GradientMatchesFiniteDifferencesInEveryUnit) {
  auto gpt = MakeGpt(Tiny());
  DenseUnitAccess access(gpt->spec(), LargeInit(*gpt));
  const int64_t batch = 2, seq = 5;
  const Batch b = MakeBatch(11, batch, seq, 3);
  access.set_backward_scale(1.0f);
  ASSERT_TRUE(gpt->ForwardBackward(access, b.tokens, b.targets, batch, seq).ok());
  auto loss = [&] {
    StatusOr<float> l = gpt->Forward(access, b.tokens, b.targets, batch, seq);
    EXPECT_TRUE(l.ok());
    return double(*l);
  };
  const ModelSpec& spec = gpt->spec();
  for (int u = 0; u < int(spec.units.size()); ++u) {
    for (int p = 0; p < int(spec.units[u].params.size()); ++p) {
      std::span<float> g = access.GradData(u, p);
      const std::vector<float> analytic(g.begin(), g.end());
      testing::CheckFiniteDifferences(spec.units[u].name + "/" + spec.units[u].params[p].name,
                                      access.ParamData(u, p), analytic, loss, 1e-2f, 3e-2, 3e-4,
                                      u == 0 && p == 0 ? 40 : 8);
    }
  }
  // The tie: a vocabulary row no input token uses still gets the output projection's gradient.
  std::vector<bool> used(11);
  for (int32_t t : b.tokens) used[t] = true;
  int unused = 0;
  while (unused < 11 && used[unused]) ++unused;
  ASSERT_LT(unused, 11);
  double norm = 0;
  for (int j = 0; j < 12; ++j) norm += std::abs(access.GradData(0, 0)[unused * 12 + j]);
  EXPECT_GT(norm, 0.0);
}

TEST(GptTest, BackwardScaleSeedsTheGradient) {
  auto gpt = MakeGpt(Tiny());
  DenseUnitAccess a(gpt->spec(), LargeInit(*gpt));
  DenseUnitAccess b(gpt->spec(), LargeInit(*gpt));
  b.set_backward_scale(0.25f);
  const Batch batch = MakeBatch(11, 2, 4, 5);
  ASSERT_TRUE(gpt->ForwardBackward(a, batch.tokens, batch.targets, 2, 4).ok());
  ASSERT_TRUE(gpt->ForwardBackward(b, batch.tokens, batch.targets, 2, 4).ok());
  for (int u = 0; u < 4; ++u) {
    std::span<float> ga = a.UnitGrads(u), gb = b.UnitGrads(u);
    for (size_t i = 0; i < ga.size(); ++i)
      ASSERT_NEAR(gb[i], 0.25f * ga[i], 1e-6f + 1e-5f * std::abs(ga[i]));
  }
}

TEST(GptTest, SgdOnARepeatedBatchReducesTheLoss) {
  auto gpt = MakeGpt(Tiny());
  DenseUnitAccess access(gpt->spec(), gpt->Init(5));
  const Batch b = MakeBatch(11, 4, 5, 17);
  float first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    access.ZeroGrads();
    StatusOr<float> loss = gpt->ForwardBackward(access, b.tokens, b.targets, 4, 5);
    ASSERT_TRUE(loss.ok());
    if (step == 0) first = *loss;
    last = *loss;
    for (int u = 0; u < access.num_units(); ++u) {
      std::span<float> p = access.UnitParams(u), g = access.UnitGrads(u);
      for (size_t i = 0; i < p.size(); ++i) p[i] -= 0.5f * g[i];
    }
  }
  EXPECT_LT(last, first - 0.3f) << "first " << first << " last " << last;
}

TEST(GptTest, SameSeedSameBits) {
  auto run = [](uint64_t seed) {
    auto gpt = MakeGpt(Tiny());
    DenseUnitAccess access(gpt->spec(), gpt->Init(seed));
    const Batch b = MakeBatch(11, 2, 5, 23);
    std::vector<float> out;
    for (int step = 0; step < 2; ++step) {
      access.ZeroGrads();
      out.push_back(*gpt->ForwardBackward(access, b.tokens, b.targets, 2, 5));
      for (int u = 0; u < access.num_units(); ++u) {
        std::span<float> p = access.UnitParams(u), g = access.UnitGrads(u);
        for (size_t i = 0; i < p.size(); ++i) p[i] -= 0.1f * g[i];
      }
    }
    for (int u = 0; u < access.num_units(); ++u) {
      out.insert(out.end(), access.UnitParams(u).begin(), access.UnitParams(u).end());
    }
    return out;
  };
  const std::vector<float> a = run(3), b = run(3), c = run(4);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);
}

TEST(GptTest, BadInputsAreInvalidArgumentsAndOpenNoBracket) {
  EXPECT_EQ(Gpt::Create({.vocab = 11, .max_seq = 5, .layers = 2, .hidden = 10, .heads = 3})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Gpt::Create({.vocab = 0, .max_seq = 5, .layers = 2, .hidden = 12, .heads = 3})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  auto gpt = MakeGpt(Tiny());
  DenseUnitAccess access(gpt->spec(), gpt->Init(1));
  Batch b = MakeBatch(11, 1, 5, 2);
  EXPECT_EQ(gpt->Forward(access, b.tokens, b.targets, 1, 4).status().code(),
            StatusCode::kInvalidArgument);  // size mismatch
  Batch long_batch = MakeBatch(11, 1, 6, 2);
  EXPECT_EQ(gpt->Forward(access, long_batch.tokens, long_batch.targets, 1, 6).status().code(),
            StatusCode::kInvalidArgument);  // seq > max_seq
  b.tokens[2] = 11;
  Status s = gpt->ForwardBackward(access, b.tokens, b.targets, 1, 5).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token 11"), std::string::npos) << s.message();
  b.tokens[2] = 0;
  b.targets[4] = -1;
  EXPECT_EQ(gpt->Forward(access, b.tokens, b.targets, 1, 5).status().code(),
            StatusCode::kInvalidArgument);
  auto other = MakeGpt({.vocab = 13, .max_seq = 5, .layers = 2, .hidden = 12, .heads = 3});
  b.targets[4] = 0;
  EXPECT_EQ(other->Forward(access, b.tokens, b.targets, 1, 5).status().code(),
            StatusCode::kInvalidArgument);  // access holds another model
  EXPECT_TRUE(access.trace().empty());
}

TEST(GptTest, ActivationsAreTracked) {
  MemoryTracker tracker;
  {
    auto gpt = MakeGpt(Tiny(), &tracker);
    DenseUnitAccess access(gpt->spec(), gpt->Init(1));
    const Batch b = MakeBatch(11, 2, 5, 2);
    ASSERT_TRUE(gpt->ForwardBackward(access, b.tokens, b.targets, 2, 5).ok());
    EXPECT_GT(gpt->activation_bytes(), 2 * 5 * 12 * 4 * 3);
    EXPECT_EQ(tracker.Current(MemoryTier::kHost, MemoryCategory::kActivations),
              gpt->activation_bytes());
  }
  EXPECT_EQ(tracker.Current(MemoryTier::kHost, MemoryCategory::kActivations), 0);
  EXPECT_GT(tracker.Peak(MemoryTier::kHost, MemoryCategory::kActivations), 0);
}

// Informational: tokens/s of the train_gpt demo's shape (not asserted; timing is not a test).
TEST(GptTest, ThroughputOfTheDemoShape) {
  auto gpt = MakeGpt({.vocab = 256, .max_seq = 64, .layers = 4, .hidden = 128, .heads = 4});
  DenseUnitAccess access(gpt->spec(), gpt->Init(1));
  const Batch b = MakeBatch(256, 4, 64, 2);
  ASSERT_TRUE(gpt->ForwardBackward(access, b.tokens, b.targets, 4, 64).ok());  // warm up
  const auto start = std::chrono::steady_clock::now();
  const int steps = 2;
  for (int i = 0; i < steps; ++i) {
    ASSERT_TRUE(gpt->ForwardBackward(access, b.tokens, b.targets, 4, 64).ok());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("gpt L=4 H=128 T=64 B=4: %.0f tokens/s (forward + backward)\n", steps * 256 / s);
}

}  // namespace
}  // namespace zs::nn
