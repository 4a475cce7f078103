// The fused optimizer step's CPU reference (kernels/fused_optimizer_reference.h), which runs
// the element functions of the CUDA kernel (kernels/optimizer_element.h), against the SIMD CPU
// optimizer (optimizers/cpu_optimizer.h): bit for bit, for every kind, state type (fp32, bf16
// with stochastic rounding, int8 blocks), gradient type and param_out type, over several steps
// on shards whose sizes no vector width divides, with two weight-decay segments and blocks of
// edge cases (zero, subnormal-scale and NaN int8 blocks; NaN matches NaN). The CPU
// optimizer is itself checked against float64 references (tests/optimizers), and the GPU
// kernel against this reference (cuda_optimizer_test), so the three agree. Runs everywhere.
#include "kernels/fused_optimizer_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/fused_optimizer_types.h"
#include "optimizers/cpu_optimizer.h"
#include "optimizers/optimizer_spec.h"
#include "optimizers/state_codec.h"
#include "runtime/base/dtype.h"

namespace zs::kernels {
namespace {

static_assert(kFusedQuantBlock == size_t(kQuantBlock));

struct Case {
  const char* name;
  OptimizerKind kind;
  float beta1;
  float beta2;
  bool nesterov;
};

constexpr Case kCases[] = {
    {"AdamW", OptimizerKind::kAdamW, 0.9f, 0.999f, false},
    {"Adam", OptimizerKind::kAdam, 0.85f, 0.99f, false},
    {"SGD", OptimizerKind::kSgd, 0.0f, 0.0f, false},
    {"SGD-momentum", OptimizerKind::kSgd, 0.9f, 0.0f, false},
    {"SGD-nesterov", OptimizerKind::kSgd, 0.8f, 0.0f, true},
    {"Adagrad", OptimizerKind::kAdagrad, 0.0f, 0.0f, false},
    {"Lion", OptimizerKind::kLion, 0.9f, 0.99f, false},
};

// One shard: the arrays both sides start from.
struct Shard {
  std::vector<float> master;
  std::vector<std::vector<uint8_t>> state{2};  // codes as bytes, whatever the type
  std::vector<std::vector<float>> scales{2};
  std::vector<uint8_t> grad;
  std::vector<uint16_t> param_out;
};

bool IsSecondMoment(OptimizerKind kind, int s) { return Int8StoresRoot(kind, s); }

// Random values, with edge cases in blocks 1 and 2 (of kQuantBlock) when n covers them: block
// 1 has zero gradients and states of 3e-39 (a subnormal: int8 scales of ~2e-41, whose
// reciprocal overflows, so codes take the division path), block 2 zero gradients and zero
// states (an int8 block of scale 0); element 100 gets a NaN gradient (a NaN block).
constexpr size_t kTinyBlock = 1, kZeroBlock = 2, kNaNElement = 100;

bool InBlock(size_t i, size_t block) { return i / kQuantBlock == block; }

Shard MakeShard(const Case& c, StateDType st, DType gt, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Shard s;
  s.master.resize(n);
  for (float& w : s.master) w = uni(rng);
  std::vector<float> g(n);
  for (float& x : g) x = normal(rng) * 0.5f;
  for (size_t i = 0; i < n; ++i) {
    if (InBlock(i, kTinyBlock) || InBlock(i, kZeroBlock)) g[i] = 0.0f;
  }
  if (n > kNaNElement) g[kNaNElement] = std::numeric_limits<float>::quiet_NaN();
  s.grad.resize(n * DTypeSize(gt));
  ConvertFromFloat(g.data(), s.grad.data(), gt, n);
  for (int k = 0; k < 2; ++k) {
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) {
      // Second moments are >= 0 (int8 holds their roots, also >= 0).
      values[i] = IsSecondMoment(c.kind, k) ? 0.01f * (uni(rng) + 1.0f) : 0.1f * uni(rng);
      if (InBlock(i, kTinyBlock)) values[i] = 3e-39f;
      if (InBlock(i, kZeroBlock)) values[i] = 0.0f;
    }
    s.state[k].resize(n * StateCodeBytes(st));
    s.scales[k].assign((n + kQuantBlock - 1) / kQuantBlock, 0.0f);
    EncodeState(st, values.data(), 0, int64_t(n), s.state[k].data(), s.scales[k].data(),
                /*seed=*/99, /*step=*/0, k);
  }
  s.param_out.assign(n, 0xdead);
  return s;
}

FusedOptimizerHyper ToFused(const OptimizerHyper& h, StateDType st, DType gt, DType pt,
                            float grad_scale, uint64_t seed) {
  FusedOptimizerHyper f;
  f.kind = FusedOptimizerKind(uint8_t(h.kind));
  f.lr = h.lr;
  f.beta1 = h.beta1;
  f.beta2 = h.beta2;
  f.eps = h.eps;
  f.nesterov = h.nesterov;
  f.step = h.step;
  f.grad_scale = grad_scale;
  f.grad_type = FusedGradType(uint8_t(gt));
  f.param_type = pt == DType::kBF16 ? FusedParamType::kBF16 : FusedParamType::kF16;
  f.state_type = FusedStateType(uint8_t(st));
  f.seed = seed;
  return f;
}

// The first index where two arrays of bytes differ, or -1.
long FirstDifference(const void* a, const void* b, size_t bytes) {
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  for (size_t i = 0; i < bytes; ++i) {
    if (x[i] != y[i]) return long(i);
  }
  return -1;
}

// NaN in each element format (NaN payloads and signs may differ: an operation on NaN keeps one
// operand's, and the two sides may order commutative operands differently).
bool IsNaN(float x) { return std::isnan(x); }
bool IsNaN16(uint16_t h, bool bf16) { return (h & 0x7fffu) > (bf16 ? 0x7f80u : 0x7c00u); }

// Elements [0, n) of two arrays of T are equal, or both NaN; `skip(i)` leaves element i out.
template <typename T, typename NaN, typename Skip>
void ExpectSame(const std::string& what, const void* a, const void* b, size_t n, NaN is_nan,
                Skip skip) {
  for (size_t i = 0; i < n; ++i) {
    T x, y;
    std::memcpy(&x, static_cast<const char*>(a) + i * sizeof(T), sizeof(T));
    std::memcpy(&y, static_cast<const char*>(b) + i * sizeof(T), sizeof(T));
    if (skip(i) || std::memcmp(&x, &y, sizeof(T)) == 0 || (is_nan(x) && is_nan(y))) continue;
    ADD_FAILURE() << what << ": first difference at element " << i;
    return;
  }
}

// Steps one shard of n elements (segments [0, split) with weight decay 0.1 and [split, n)
// without) `steps` times through CpuOptimizer and through the reference, one tensor per
// segment, and compares every array after each step.
void CompareWithCpuOptimizer(const Case& c, StateDType st, DType gt, DType pt, size_t n,
                             size_t split, int steps) {
  const std::string name = std::string(c.name) + " states " + std::string(StateDTypeName(st)) +
                           " grad " + std::string(DTypeName(gt)) + " param_out " +
                           std::string(DTypeName(pt));
  SCOPED_TRACE(name);
  const Shard init = MakeShard(c, st, gt, n, 1234);
  Shard cpu = init, ref = init;
  OptimizerHyper h;
  h.kind = c.kind;
  h.lr = 0.01f;
  h.beta1 = c.beta1;
  h.beta2 = c.beta2;
  h.eps = 1e-6f;
  h.nesterov = c.nesterov;
  const uint64_t seed = 0x5eedull;
  const float grad_scale = 0.75f;
  const int num_states = NumStates(c.kind, c.beta1);
  const ShardSegment segments[] = {{0, int64_t(split), 0.1f, 0},
                                   {int64_t(split), int64_t(n), 0.0f, 0}};
  CpuOptimizer optimizer(/*threads=*/2, CpuOptimizer::kMinTileElements);
  for (int step = 1; step <= steps; ++step) {
    h.step = step;
    ShardStep shard;
    shard.n = int64_t(n);
    shard.master = cpu.master.data();
    for (int k = 0; k < num_states; ++k) {
      shard.state[k] = cpu.state[k].data();
      shard.state_scale[k] = cpu.scales[k].data();
    }
    shard.state_dtype = st;
    shard.grad = cpu.grad.data();
    shard.grad_dtype = gt;
    shard.grad_scale = grad_scale;
    shard.param_out = cpu.param_out.data();
    shard.param_dtype = pt;
    shard.segments = segments;
    shard.seed = seed;
    optimizer.Step(h, shard);

    FusedOptimizerTensor tensors[2];
    const size_t code_bytes = StateCodeBytes(st);
    const size_t grad_bytes = DTypeSize(gt);
    for (int t = 0; t < 2; ++t) {
      const size_t begin = t == 0 ? 0 : split, end = t == 0 ? split : n;
      FusedOptimizerTensor& x = tensors[t];
      x.master = ref.master.data() + begin;
      for (int k = 0; k < num_states; ++k) {
        (k == 0 ? x.state0 : x.state1) = ref.state[k].data() + begin * code_bytes;
        (k == 0 ? x.state0_scales : x.state1_scales) = ref.scales[k].data() + begin / kQuantBlock;
      }
      x.grad = ref.grad.data() + begin * grad_bytes;
      x.param_out = ref.param_out.data() + begin;
      x.n = end - begin;
      x.weight_decay = segments[t].weight_decay;
      x.index_base = begin;
    }
    ASSERT_TRUE(FusedOptimizerStepReference(ToFused(h, st, gt, pt, grad_scale, seed), tensors, 2));

    SCOPED_TRACE("step " + std::to_string(step));
    const auto none = [](size_t) { return false; };
    ExpectSame<float>("master", cpu.master.data(), ref.master.data(), n, IsNaN, none);
    const bool out_bf16 = pt == DType::kBF16;
    ExpectSame<uint16_t>(
        "param_out", cpu.param_out.data(), ref.param_out.data(), n,
        [&](uint16_t h) { return IsNaN16(h, out_bf16); }, none);
    for (int k = 0; k < num_states; ++k) {
      const std::string name = "state" + std::to_string(k);
      const void* got = cpu.state[k].data();
      const void* want = ref.state[k].data();
      if (st == StateDType::kF32) {
        ExpectSame<float>(name, got, want, n, IsNaN, none);
      } else if (st == StateDType::kBF16) {
        ExpectSame<uint16_t>(
            name, got, want, n, [](uint16_t h) { return IsNaN16(h, true); }, none);
      } else {
        // The codes of a non-finite block are unspecified ([Note: int8 quantization]: they
        // decode to no useful value, and x86 and Arm clamp NaN differently).
        const std::vector<float>& scales = cpu.scales[k];
        ExpectSame<int8_t>(
            name, got, want, n, [](int8_t) { return false; },
            [&](size_t i) { return !std::isfinite(scales[i / kQuantBlock]); });
        ExpectSame<float>(name + " scales", cpu.scales[k].data(), ref.scales[k].data(),
                          cpu.scales[k].size(), IsNaN, none);
      }
    }
    if (testing::Test::HasFailure()) return;
  }
  // The step did something: the weights moved.
  EXPECT_NE(FirstDifference(init.master.data(), ref.master.data(), n * 4), -1);
}

TEST(FusedOptimizerReference, EqualsCpuOptimizerBitForBit) {
  // 3 * 256 + 41 elements: a partial last int8 block, and no vector width divides it; the
  // segment boundary at 512 is on an int8 block (tensors start blocks).
  for (const Case& c : kCases) {
    for (StateDType st : {StateDType::kF32, StateDType::kBF16, StateDType::kInt8}) {
      for (DType gt : {DType::kF32, DType::kBF16, DType::kF16}) {
        for (DType pt : {DType::kBF16, DType::kF16}) {
          CompareWithCpuOptimizer(c, st, gt, pt, 3 * 256 + 41, 512, /*steps=*/3);
        }
      }
    }
  }
}

TEST(FusedOptimizerReference, Bf16StatesAcrossA32BitIndexBoundary) {
  // The rounding key changes where the shard index crosses 2^32: a tensor whose index_base
  // puts that inside it must round like two tensors split there.
  const size_t n = 100;
  std::vector<float> master(n, 0.5f), grad(n);
  for (size_t i = 0; i < n; ++i) grad[i] = 0.001f * float(int(i) - 50) + 0.0003f;
  std::vector<uint16_t> m(n, 0), v(n, 0);
  FusedOptimizerHyper h;
  h.state_type = FusedStateType::kBF16;
  h.seed = 7;
  // Runs `tensors`, each tensor t covering elements [offsets[t], offsets[t] + n) of the arrays.
  auto run = [&](std::vector<FusedOptimizerTensor> tensors, const std::vector<size_t>& offsets,
                 std::vector<float>& w, std::vector<uint16_t>& m_out,
                 std::vector<uint16_t>& v_out) {
    w = master;
    m_out = m;
    v_out = v;
    for (size_t k = 0; k < tensors.size(); ++k) {
      FusedOptimizerTensor& t = tensors[k];
      t.master = w.data() + offsets[k];
      t.state0 = m_out.data() + offsets[k];
      t.state1 = v_out.data() + offsets[k];
      t.grad = grad.data() + offsets[k];
    }
    ASSERT_TRUE(FusedOptimizerStepReference(h, tensors.data(), tensors.size()));
  };
  const uint64_t base = (uint64_t{1} << 32) - 30;
  FusedOptimizerTensor whole;
  whole.n = n;
  whole.index_base = base;
  FusedOptimizerTensor lo = whole, hi = whole;
  lo.n = 30;
  hi.n = n - 30;
  hi.index_base = base + 30;
  std::vector<float> w1, w2;
  std::vector<uint16_t> m1, m2, v1, v2;
  run({whole}, {0}, w1, m1, v1);
  run({lo, hi}, {0, 30}, w2, m2, v2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
  // The rounding depends on the index: the same values at other indices round otherwise.
  std::vector<uint16_t> m3, v3;
  std::vector<float> w3;
  FusedOptimizerTensor shifted = whole;
  shifted.index_base = base + (uint64_t{1} << 33);
  run({shifted}, {0}, w3, m3, v3);
  EXPECT_NE(m1, m3);
}

TEST(FusedOptimizerReference, RefusesWhatTheLaunchRefuses) {
  float buf[4] = {};
  FusedOptimizerTensor t;
  t.master = buf;
  t.grad = buf;
  t.n = 4;
  FusedOptimizerHyper h;
  h.kind = FusedOptimizerKind::kSgd;
  h.beta1 = 0.0f;  // plain SGD: no state
  EXPECT_EQ(FusedOptimizerArgsError(h, &t, 1), nullptr);
  EXPECT_TRUE(FusedOptimizerStepReference(h, &t, 1));
  h.beta1 = 0.9f;  // momentum: state0 needed
  EXPECT_NE(FusedOptimizerArgsError(h, &t, 1), nullptr);
  EXPECT_FALSE(FusedOptimizerStepReference(h, &t, 1));
  t.state0 = buf;
  h.state_type = FusedStateType::kInt8;  // int8 also needs the scales
  EXPECT_NE(FusedOptimizerArgsError(h, &t, 1), nullptr);
  t.state0_scales = buf;
  EXPECT_EQ(FusedOptimizerArgsError(h, &t, 1), nullptr);
  h.step = 0;
  EXPECT_NE(FusedOptimizerArgsError(h, &t, 1), nullptr);
  h.step = 1;
  h.state_type = FusedStateType(7);
  EXPECT_NE(FusedOptimizerArgsError(h, &t, 1), nullptr);
  h.state_type = FusedStateType::kF32;
  t.grad = nullptr;
  EXPECT_NE(FusedOptimizerArgsError(h, &t, 1), nullptr);
  t.n = 0;  // empty tensors may hold nulls
  EXPECT_EQ(FusedOptimizerArgsError(h, &t, 1), nullptr);
  EXPECT_NE(FusedOptimizerArgsError(h, nullptr, 1), nullptr);
  EXPECT_EQ(FusedOptimizerArgsError(h, nullptr, 0), nullptr);
}

}  // namespace
}  // namespace zs::kernels
