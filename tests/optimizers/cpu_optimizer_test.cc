#include "optimizers/cpu_optimizer.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "optimizers/adamw_reference.h"
#include "optimizers/optimizer_kernels.h"
#include "optimizers/reference_optimizers.h"
#include "optimizers/state_codec.h"

namespace zs {
namespace {

// Sanitizer, debug and emulated builds (aarch64 under qemu, make test-arm: every SIMD target at
// every SVE vector length) run the same checks on fewer and smaller shards.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(NDEBUG) || \
    defined(ZS_EMULATED_TESTS)
constexpr bool kSlowBuild = true;
#else
constexpr bool kSlowBuild = false;
#endif

// The tile the tests step with (CpuOptimizer(threads, kTile)): small, so that shards of a few
// tiles stay quick to check; BitIdenticalAcrossThreadsAndSplits compares it with the default
// and the smallest tile.
constexpr int64_t kTile = 16 * 1024;

// splitmix64: cheap, deterministic, the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * double(Next() >> 11) * 0x1p-53; }
  // |x| in [lo, hi], random sign: never zero.
  double SignedMagnitude(double lo, double hi) {
    const double m = Uniform(lo, hi);
    return (Next() & 1) ? m : -m;
  }

 private:
  uint64_t state_;
};

struct KindCase {
  const char* name;
  OptimizerKind kind;
  float beta1;
  bool nesterov = false;
};

const KindCase kKinds[] = {
    {"AdamW", OptimizerKind::kAdamW, 0.9f},
    {"Adam", OptimizerKind::kAdam, 0.9f},
    {"SGD", OptimizerKind::kSgd, 0.0f},
    {"SGD-momentum", OptimizerKind::kSgd, 0.9f},
    {"SGD-nesterov", OptimizerKind::kSgd, 0.9f, true},
    {"Adagrad", OptimizerKind::kAdagrad, 0.0f},
    {"Lion", OptimizerKind::kLion, 0.9f},
};

OptimizerHyper MakeHyper(const KindCase& k, int64_t step) {
  OptimizerHyper h;
  h.kind = k.kind;
  h.lr = k.kind == OptimizerKind::kLion ? 1e-3f : 1e-2f;
  h.beta1 = k.beta1;
  h.beta2 = k.kind == OptimizerKind::kLion ? 0.99f : 0.999f;
  h.eps = 1e-8f;
  h.nesterov = k.nesterov;
  h.step = step;
  return h;
}

int StatesOf(const KindCase& k) { return NumStates(k.kind, k.beta1); }

std::string ParamName(std::optional<DType> t) {
  return t ? std::string(DTypeName(*t)) : std::string("none");
}

// Segments with different weight decays, one of them empty.
std::vector<ShardSegment> MakeSegments(int64_t n) {
  const int64_t a = n / 5, b = n / 2, c = std::min(n, 3 * n / 4 + 1);
  return {{0, a, 0.1f}, {a, a, 0.5f}, {a, b, 0.0f}, {b, c, 0.05f}, {c, n, 0.01f}};
}

// Segment i in group i % groups (all in group 0 when groups <= 1).
void AssignGroups(std::vector<ShardSegment>& segments, size_t groups) {
  for (size_t i = 0; i < segments.size(); ++i) segments[i].group = groups > 1 ? int(i % groups) : 0;
}

std::vector<int> PerElementGroup(const std::vector<ShardSegment>& segments, int64_t n) {
  std::vector<int> group(n);
  for (const auto& s : segments) std::fill(group.begin() + s.begin, group.begin() + s.end, s.group);
  return group;
}

std::vector<float> PerElementDecay(const std::vector<ShardSegment>& segments, int64_t n) {
  std::vector<float> wd(n);
  for (const auto& s : segments)
    std::fill(wd.begin() + s.begin, wd.begin() + s.end, s.weight_decay);
  return wd;
}

// All the buffers of one shard, in their stored dtypes.
struct Shard {
  KindCase kind;
  int64_t n = 0;
  StateDType state_dtype = StateDType::kF32;
  DType grad_dtype = DType::kF32;
  std::optional<DType> param_dtype;
  uint64_t seed = 0;
  std::vector<float> master;
  std::vector<uint8_t> state[2];
  std::vector<float> scale[2];
  std::vector<uint8_t> grad;
  std::vector<uint8_t> param_out;
  std::vector<ShardSegment> segments;
  std::vector<GroupHyper> groups;  // empty: OptimizerHyper's values for every segment

  Shard(const KindCase& k, int64_t n_, StateDType sd, DType gd, std::optional<DType> pd,
        uint64_t seed_)
      : kind(k), n(n_), state_dtype(sd), grad_dtype(gd), param_dtype(pd), seed(seed_) {
    Rng rng(seed);
    master.resize(n);
    for (float& w : master) w = float(rng.SignedMagnitude(0.01, 1.0));
    for (int s = 0; s < StatesOf(k); ++s) {
      std::vector<float> v(n);
      for (float& x : v) x = InitialState(rng, s);
      if (sd == StateDType::kInt8 && Int8StoresRoot(k.kind, s)) {
        for (float& x : v) x = std::sqrt(x);  // [Note: int8 second moments]
      }
      state[s].resize(StateBytes(sd, n));
      scale[s].resize((n + kQuantBlock - 1) / kQuantBlock);
      EncodeState(sd, v.data(), 0, n, state[s].data(), scale[s].data(), seed, 0, s);
    }
    grad.resize(n * DTypeSize(gd));
    if (pd) param_out.assign(n * DTypeSize(*pd), 0xAB);
    segments = MakeSegments(n);
  }

  float InitialState(Rng& rng, int s) const {
    switch (kind.kind) {
      case OptimizerKind::kAdamW:
      case OptimizerKind::kAdam:
        return s == 0 ? float(rng.SignedMagnitude(1e-3, 0.1)) : float(rng.Uniform(1e-3, 0.1));
      case OptimizerKind::kSgd:
        return float(rng.SignedMagnitude(0.01, 1.0));
      case OptimizerKind::kAdagrad:
        return float(rng.Uniform(0.1, 1.0));
      case OptimizerKind::kLion:
        return float(rng.SignedMagnitude(1e-3, 0.1));
    }
    return 0.0f;
  }

  // New random gradients for `step` (the same for every shard built with the same seed).
  void FillGrad(int64_t step) {
    Rng rng(seed * 1000003 + uint64_t(step));
    for (int64_t i = 0; i < n; ++i) {
      StoreFromFloat(grad.data(), grad_dtype, i, float(rng.SignedMagnitude(0.01, 1.0)));
    }
  }

  std::vector<float> Decoded(int s) const {
    if (s >= StatesOf(kind)) return {};
    std::vector<float> v(n);
    DecodeState(state_dtype, state[s].data(), scale[s].data(), 0, n, v.data());
    if (state_dtype == StateDType::kInt8 && Int8StoresRoot(kind.kind, s)) {
      for (float& x : v) x *= x;
    }
    return v;
  }

  std::vector<float> GradFloats() const {
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = LoadAsFloat(grad.data(), grad_dtype, i);
    return g;
  }

  // Elements [begin, end) as their own ShardStep (segments clipped and rebased).
  ShardStep View(int64_t begin, int64_t end, std::vector<ShardSegment>& segs) {
    segs.clear();
    for (const auto& s : segments) {
      const int64_t b = std::max(s.begin, begin), e = std::min(s.end, end);
      if (b < e || (s.begin == s.end && s.begin >= begin && s.begin < end)) {
        segs.push_back({b - begin, std::max(b, e) - begin, s.weight_decay, s.group});
      }
    }
    if (segs.empty()) segs.push_back({0, end - begin, 0.0f});
    ShardStep st;
    st.n = end - begin;
    st.master = master.data() + begin;
    for (int s = 0; s < StatesOf(kind); ++s) {
      st.state[s] = state[s].data() + begin * int64_t(StateCodeBytes(state_dtype));
      st.state_scale[s] = scale[s].data() + begin / kQuantBlock;
    }
    st.state_dtype = state_dtype;
    st.grad = grad.data() + begin * DTypeSize(grad_dtype);
    st.grad_dtype = grad_dtype;
    st.grad_scale = 0.5f;
    if (param_dtype) {
      st.param_out = param_out.data() + begin * DTypeSize(*param_dtype);
      st.param_dtype = *param_dtype;
    }
    st.segments = segs;
    st.groups = groups;
    st.seed = seed;
    st.index_base = begin;  // the sub-shard's place in the shard's rounding stream
    return st;
  }
};

// Runs `steps` steps, each split into sub-shards at `cuts` (empty: the whole shard at once).
void RunSteps(CpuOptimizer& opt, Shard& shard, int64_t first_step, int steps,
              const std::vector<int64_t>& cuts = {}) {
  for (int64_t step = first_step; step < first_step + steps; ++step) {
    shard.FillGrad(step);
    std::vector<int64_t> bounds = {0};
    for (int64_t c : cuts) {
      if (c > bounds.back() && c < shard.n) bounds.push_back(c);
    }
    bounds.push_back(shard.n);
    for (size_t p = 0; p + 1 < bounds.size(); ++p) {
      std::vector<ShardSegment> segs;
      opt.Step(MakeHyper(shard.kind, step), shard.View(bounds[p], bounds[p + 1], segs));
    }
  }
}

// Counts mismatches and reports the first few.
class Mismatches {
 public:
  void Add(const std::string& what) {
    if (++count_ <= 5) ADD_FAILURE() << what;
  }
  ~Mismatches() { EXPECT_EQ(count_, 0) << "mismatching elements in total"; }

 private:
  int64_t count_ = 0;
};

bool Close(double got, double want, double rel, double abs) {
  if (std::isnan(want)) return std::isnan(got);
  return std::isfinite(got) && std::abs(got - want) <= rel * std::abs(want) + abs;
}

uint16_t Bits16(const std::vector<uint8_t>& buf, int64_t i) {
  uint16_t b;
  std::memcpy(&b, buf.data() + 2 * i, 2);
  return b;
}

// param_out must be the master rounded to nearest even, bit for bit.
void CheckParamOut(const Shard& shard, Mismatches& bad) {
  if (!shard.param_dtype) return;
  for (int64_t i = 0; i < shard.n; ++i) {
    const float w = shard.master[i];
    uint32_t got = 0, want = 0;
    switch (*shard.param_dtype) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, shard.param_out.data() + 4 * i, 4);
        got = std::bit_cast<uint32_t>(f);
        want = std::bit_cast<uint32_t>(w);
        break;
      }
      case DType::kBF16:
        got = Bits16(shard.param_out, i);
        want = FloatToBF16(w).bits;
        break;
      case DType::kF16:
        got = Bits16(shard.param_out, i);
        want = FloatToF16(w).bits;
        break;
    }
    if (got != want)
      bad.Add(fmt::format("param_out[{}] = {:#x}, rounded master {} = {:#x}", i, got, w, want));
  }
}

// One step on `shard` compared with ReferenceStep on the same (decoded) inputs.
void StepAndCompare(CpuOptimizer& opt, Shard& shard, int64_t step) {
  const KindCase& k = shard.kind;
  const OptimizerHyper h = MakeHyper(k, step);
  shard.FillGrad(step);
  const std::vector<float> master0 = shard.master;
  const std::vector<float> s0 = shard.Decoded(0), s1 = shard.Decoded(1);
  const std::vector<float> g = shard.GradFloats();
  std::vector<ShardSegment> segs;
  opt.Step(h, shard.View(0, shard.n, segs));
  const std::vector<float> wd = PerElementDecay(shard.segments, shard.n);
  // One reference per parameter group, each with the group's hyper-parameters; element i is
  // compared with the reference of its segment's group.
  std::vector<OptimizerHyper> group_hyper = {h};
  if (!shard.groups.empty()) group_hyper.clear();
  for (const GroupHyper& gh : shard.groups) group_hyper.push_back(WithGroup(h, gh));
  std::vector<ReferenceState> refs;
  for (const OptimizerHyper& gh : group_hyper) {
    refs.push_back(ReferenceStep(gh, master0, s0, s1, g, 0.5f, wd));
  }
  const std::vector<int> group_of = PerElementGroup(shard.segments, shard.n);

  Mismatches bad;
  const double rel = 1e-5, abs = 1e-6;
  for (int64_t i = 0; i < shard.n; ++i) {
    const double want = refs[group_of[i]].master[i];
    const double got = shard.master[i];
    if (k.kind == OptimizerKind::kLion) {
      // sign() of a value within rounding of 0 may go either way in float.
      const double b1 = group_hyper[group_of[i]].beta1;
      const double c = b1 * s0[i] + (1.0 - b1) * double(g[i]) * 0.5;
      if (std::abs(c) <= 1e-5 * (std::abs(b1 * s0[i]) + std::abs((1.0 - b1) * g[i] * 0.5)))
        continue;
    }
    if (!Close(got, want, rel, abs))
      bad.Add(fmt::format("master[{}] = {}, reference {}", i, got, want));
  }
  // States: float rounding (fp32), the bf16 ulp (stochastic rounding moves at most one ulp) or
  // half the int8 block scale (round to nearest), plus float rounding.
  for (int s = 0; s < StatesOf(k); ++s) {
    const std::vector<float> got = shard.Decoded(s);
    std::vector<double> want(shard.n);
    for (int64_t i = 0; i < shard.n; ++i) {
      const ReferenceState& ref = refs[group_of[i]];
      want[i] = s == 0 ? ref.state0[i] : ref.state1[i];
    }
    // Root states hold sqrt(v) in int8: the code's error e <= max_root / 254 becomes
    // 2 sqrt(v) e + e^2 in v.
    const bool root = shard.state_dtype == StateDType::kInt8 && Int8StoresRoot(k.kind, s);
    std::vector<double> block_max((shard.n + kQuantBlock - 1) / kQuantBlock, 0.0);
    for (int64_t i = 0; i < shard.n; ++i) {
      const double stored = root ? std::sqrt(std::max(0.0, want[i])) : std::abs(want[i]);
      block_max[i / kQuantBlock] = std::max(block_max[i / kQuantBlock], stored);
    }
    for (int64_t i = 0; i < shard.n; ++i) {
      double tol_rel = rel, tol_abs = abs;
      if (shard.state_dtype == StateDType::kBF16) tol_rel = 0x1p-7 + rel;
      if (shard.state_dtype == StateDType::kInt8) {
        const double e = 0.5 * block_max[i / kQuantBlock] / 127 * (1 + 1e-3);
        tol_abs = (root ? 2 * std::sqrt(std::max(0.0, want[i])) * e + e * e : e) + abs;
      }
      if (!Close(got[i], want[i], tol_rel, tol_abs)) {
        bad.Add(fmt::format("state{}[{}] = {}, reference {}", s, i, got[i], want[i]));
      }
    }
  }
  CheckParamOut(shard, bad);
}

std::vector<int64_t> SweepSizes() {
  if (kSlowBuild) return {1, 7, 33, 1000, kTile + 1};
  return {1, 7, 33, 1000, kTile + 1, 40001};
}

const std::optional<DType> kParamDTypes[] = {std::nullopt, DType::kBF16, DType::kF16};
const DType kGradDTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

TEST(CpuOptimizerTest, MatchesFloat64ReferenceFp32States) {
  CpuOptimizer opt(1, kTile);
  uint64_t seed = 1;
  for (const KindCase& k : kKinds) {
    for (DType gd : kGradDTypes) {
      for (std::optional<DType> pd : kParamDTypes) {
        for (int64_t n : SweepSizes()) {
          if (kSlowBuild && n > kTile && pd == DType::kF16) continue;  // time, not coverage
          SCOPED_TRACE(
              fmt::format("{} grad {} param_out {} n {}", k.name, DTypeName(gd), ParamName(pd), n));
          Shard shard(k, n, StateDType::kF32, gd, pd, ++seed);
          for (int64_t step = 1; step <= 3; ++step) StepAndCompare(opt, shard, step);
        }
      }
    }
  }
}

TEST(CpuOptimizerTest, MatchesFloat64ReferenceReducedStates) {
  CpuOptimizer opt(2, kTile);
  uint64_t seed = 1000;
  const int64_t sizes[] = {1000, kSlowBuild ? kTile + 300 : 40001};
  for (const KindCase& k : kKinds) {
    if (StatesOf(k) == 0) continue;
    for (StateDType sd : {StateDType::kBF16, StateDType::kInt8}) {
      for (int64_t n : sizes) {
        SCOPED_TRACE(fmt::format("{} states {} n {}", k.name, StateDTypeName(sd), n));
        Shard shard(k, n, sd, DType::kBF16, DType::kBF16, ++seed);
        for (int64_t step = 1; step <= 3; ++step) StepAndCompare(opt, shard, step);
      }
    }
  }
}

// Groups that differ in every field a group may set; SGD keeps momentum zero exactly when the
// step's is ([Note: parameter groups]).
std::vector<GroupHyper> DistinctGroups(const KindCase& k) {
  const OptimizerHyper h = MakeHyper(k, 1);
  std::vector<GroupHyper> groups = {
      GroupOf(h), {h.lr * 0.25f, 0.8f, 0.99f, 1e-6f}, {h.lr * 3.0f, 0.95f, 0.9f, 1e-3f}};
  if (k.kind == OptimizerKind::kSgd || k.kind == OptimizerKind::kAdagrad) {
    groups[1].beta1 = k.beta1 != 0.0f ? 0.5f : 0.0f;
    groups[2].beta1 = k.beta1 != 0.0f ? 0.99f : 0.0f;
  }
  return groups;
}

TEST(CpuOptimizerTest, ParameterGroupsMatchFloat64Reference) {
  CpuOptimizer opt(2, kTile);
  uint64_t seed = 5000;
  const int64_t sizes[] = {33, kSlowBuild ? kTile + 300 : 3 * kTile + 77};
  for (const KindCase& k : kKinds) {
    for (StateDType sd : {StateDType::kF32, StateDType::kBF16, StateDType::kInt8}) {
      if (sd != StateDType::kF32 && StatesOf(k) == 0) continue;
      for (int64_t n : sizes) {
        SCOPED_TRACE(fmt::format("{} states {} n {} with 3 groups", k.name, StateDTypeName(sd), n));
        Shard shard(k, n, sd, DType::kBF16, DType::kBF16, ++seed);
        shard.groups = DistinctGroups(k);
        AssignGroups(shard.segments, shard.groups.size());
        for (int64_t step = 1; step <= 3; ++step) StepAndCompare(opt, shard, step);
      }
    }
  }
}

// A group with OptimizerHyper's own values steps exactly as no groups; one that differs in a
// single field changes exactly its own segments.
TEST(CpuOptimizerTest, GroupsChangeOnlyTheirOwnSegments) {
  CpuOptimizer opt(1, kTile);
  for (const KindCase& k : kKinds) {
    SCOPED_TRACE(k.name);
    const int64_t n = 2 * kTile + 5;
    Shard plain(k, n, StateDType::kF32, DType::kF32, DType::kBF16, 77);
    Shard same = plain, changed = plain;
    const OptimizerHyper h = MakeHyper(k, 1);
    same.groups = {GroupOf(h), GroupOf(h)};
    AssignGroups(same.segments, 2);
    changed.groups = same.groups;
    changed.groups[1].lr *= 2.0f;
    AssignGroups(changed.segments, 2);
    RunSteps(opt, plain, 1, 2);
    RunSteps(opt, same, 1, 2);
    RunSteps(opt, changed, 1, 2);
    EXPECT_EQ(std::memcmp(plain.master.data(), same.master.data(), 4 * n), 0);
    const std::vector<int> group_of = PerElementGroup(changed.segments, n);
    int64_t moved = 0, stray = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool differs = plain.master[i] != changed.master[i];
      if (group_of[i] == 1)
        moved += differs;
      else
        stray += differs;
    }
    EXPECT_EQ(stray, 0) << "elements outside group 1 changed";
    EXPECT_GT(moved, 0) << "group 1's lr had no effect";
  }
}

void ExpectSameBits(const Shard& a, const Shard& b, const std::string& what) {
  EXPECT_EQ(std::memcmp(a.master.data(), b.master.data(), 4 * a.n), 0) << what << ": master";
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(a.state[s], b.state[s]) << what << ": state " << s;
    EXPECT_EQ(a.scale[s], b.scale[s]) << what << ": scales " << s;
  }
  EXPECT_EQ(a.param_out, b.param_out) << what << ": param_out";
}

TEST(CpuOptimizerTest, BitIdenticalAcrossThreadsAndSplits) {
  CpuOptimizer opt1(1, kTile), opt2(2, kTile), opt3(3, kTile);
  CpuOptimizer default_tiles(2), smallest_tiles(2, CpuOptimizer::kMinTileElements);
  ASSERT_EQ(default_tiles.tile_elements(), CpuOptimizer::kDefaultTileElements);
  // Shards of fewer than threads tiles get smaller tiles, so that every thread has work.
  EXPECT_EQ(default_tiles.StepTileElements(1 << 20), CpuOptimizer::kDefaultTileElements);
  EXPECT_EQ(default_tiles.StepTileElements(2 * 65536), 65536);
  EXPECT_EQ(default_tiles.StepTileElements(65536), 32768);
  EXPECT_EQ(default_tiles.StepTileElements(40001), 32768);
  EXPECT_EQ(default_tiles.StepTileElements(100), CpuOptimizer::kMinTileElements);
  EXPECT_EQ(opt1.StepTileElements(100), kTile);  // one thread: never smaller
  const int64_t n = kSlowBuild ? kTile + 77 : 40001;
  struct Dtypes {
    DType grad;
    std::optional<DType> param;
  };
  const Dtypes combos[] = {{DType::kF32, std::nullopt},
                           {DType::kBF16, DType::kBF16},
                           {DType::kF16, DType::kF16},
                           {DType::kF32, DType::kF32}};
  uint64_t seed = 5000;
  for (const KindCase& k : kKinds) {
    for (const Dtypes& d : combos) {
      for (StateDType sd : {StateDType::kF32, StateDType::kBF16, StateDType::kInt8}) {
        if (sd != StateDType::kF32 && (StatesOf(k) == 0 || d.grad != DType::kBF16)) continue;
        SCOPED_TRACE(fmt::format("{} grad {} param_out {} states {}", k.name, DTypeName(d.grad),
                                 ParamName(d.param), StateDTypeName(sd)));
        ++seed;
        Shard base(k, n, sd, d.grad, d.param, seed);
        RunSteps(opt1, base, 1, 3);
        for (CpuOptimizer* opt : {&opt2, &opt3, &default_tiles, &smallest_tiles}) {
          Shard other(k, n, sd, d.grad, d.param, seed);
          RunSteps(*opt, other, 1, 3);
          ExpectSameBits(
              base, other,
              fmt::format("{} threads, tiles of {}", opt->threads(), opt->tile_elements()));
        }
        // Sub-shards start tiles elsewhere: any cut for fp32 states, block-aligned cuts for
        // int8 and bf16 (bf16 states key their rounding on index_base + the sub-shard index).
        std::vector<std::vector<int64_t>> cut_sets;
        if (sd == StateDType::kF32) cut_sets = {{1}, {7, 16383}, {kTile - 3, kTile + 5, 20001}};
        if (sd == StateDType::kF32 && kSlowBuild) cut_sets = {{7, kTile - 3, kTile + 5}};
        if (sd != StateDType::kF32) cut_sets = {{kQuantBlock}, {kTile + 2 * kQuantBlock}};
        for (const auto& cuts : cut_sets) {
          Shard other(k, n, sd, d.grad, d.param, seed);
          RunSteps(opt2, other, 1, 3, cuts);
          ExpectSameBits(base, other, fmt::format("cut at {}", fmt::join(cuts, ",")));
        }
      }
    }
  }
}

// A shard whose rounding stream crosses 2^32 (index_base near it) steps as its two halves
// stepped apart, each keyed by its own index_base: the kernel ranges split at the boundary.
TEST(CpuOptimizerTest, Bf16IndexBaseAcross2To32) {
  CpuOptimizer opt(2, kTile);
  const KindCase& k = kKinds[0];
  const int64_t n = 4 * kQuantBlock, cut = kQuantBlock;
  const int64_t base = (int64_t{1} << 32) - cut;
  Shard whole(k, n, StateDType::kBF16, DType::kBF16, DType::kBF16, 77);
  Shard halves(k, n, StateDType::kBF16, DType::kBF16, DType::kBF16, 77);
  for (int64_t step = 1; step <= 3; ++step) {
    whole.FillGrad(step);
    halves.FillGrad(step);
    std::vector<ShardSegment> segs;
    ShardStep w = whole.View(0, n, segs);
    w.index_base = base;
    opt.Step(MakeHyper(k, step), w);
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, cut}, {cut, n}}) {
      std::vector<ShardSegment> part_segs;
      ShardStep h = halves.View(b, e, part_segs);
      h.index_base = base + b;
      opt.Step(MakeHyper(k, step), h);
    }
  }
  ExpectSameBits(whole, halves, "index_base across 2^32");
  // And the stream index matters: the same shard at index_base 0 rounds differently.
  Shard at_zero(k, n, StateDType::kBF16, DType::kBF16, DType::kBF16, 77);
  RunSteps(opt, at_zero, 1, 3);
  EXPECT_NE(at_zero.state[1], whole.state[1]);
}

// The int8 elements that go through the scratch: those of every block of kQuantBlock (the
// shard's last one may be partial) with a segment boundary strictly inside it.
int64_t StraddlingBlockElements(const std::vector<ShardSegment>& segments, int64_t n) {
  int64_t elements = 0;
  for (int64_t b = 0; b < n; b += kQuantBlock) {
    const int64_t e = std::min(n, b + kQuantBlock);
    if (std::any_of(segments.begin(), segments.end(),
                    [&](const ShardSegment& s) { return b < s.end && s.end < e; })) {
      elements += e - b;
    }
  }
  return elements;
}

// [Note: fused int8 states]: an int8 block inside one weight-decay segment runs the fused kernel,
// one that straddles a segment boundary the decode-update-encode scratch path. Cutting one
// segment into pieces of equal weight decay and group, 250 elements long (so every block of 256
// holds a cut), sends every block through the scratch instead: the bits must not change. Also with
// non-finite states: a NaN gradient gives Lion a NaN momentum under a finite weight, and a huge one
// gives Adam an infinite second moment.
TEST(CpuOptimizerTest, FusedInt8EqualsScratchPath) {
  CpuOptimizer opt(2, kTile);
  const int64_t n = kSlowBuild ? kTile + 300 : 3 * kTile + 1234;
  uint64_t seed = 7000;
  auto same_floats = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() &&
           (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
  };
  for (const KindCase& k : kKinds) {
    if (StatesOf(k) == 0) continue;
    for (DType gd : {DType::kF32, DType::kBF16}) {
      for (bool non_finite : {false, true}) {
        SCOPED_TRACE(fmt::format("{} grad {}{}", k.name, DTypeName(gd),
                                 non_finite ? " with non-finite gradients" : ""));
        ++seed;
        Shard fused(k, n, StateDType::kInt8, gd, DType::kBF16, seed);
        fused.segments = {{0, n, 0.05f}};
        Shard scratch = fused;
        scratch.segments.clear();
        for (int64_t begin = 0; begin < n; begin += 250) {
          scratch.segments.push_back({begin, std::min(n, begin + 250), 0.05f});
        }
        for (int64_t step = 1; step <= 3; ++step) {
          for (Shard* sh : {&fused, &scratch}) {
            sh->FillGrad(step);
            if (non_finite && gd == DType::kF32) {
              float* g = reinterpret_cast<float*>(sh->grad.data());
              for (int64_t i = 1000 + step; i < n; i += 4099) {
                g[i] = std::numeric_limits<float>::quiet_NaN();
                g[i + 7] = 3e38f;  // its square overflows
              }
            }
            std::vector<ShardSegment> segs;
            opt.Step(MakeHyper(sh->kind, step), sh->View(0, n, segs));
            EXPECT_EQ(opt.last_step_scratch_elements(),
                      sh == &fused ? 0 : StraddlingBlockElements(sh->segments, n));
          }
        }
        EXPECT_EQ(std::memcmp(fused.master.data(), scratch.master.data(), 4 * n), 0) << "master";
        for (int s = 0; s < 2; ++s) {
          EXPECT_EQ(fused.state[s], scratch.state[s]) << "state " << s;
          EXPECT_TRUE(same_floats(fused.scale[s], scratch.scale[s])) << "scales " << s;
        }
        EXPECT_EQ(fused.param_out, scratch.param_out) << "param_out";
        // The runs must have changed the states for the comparison to mean something.
        Shard initial(k, n, StateDType::kInt8, gd, DType::kBF16, seed);
        EXPECT_NE(fused.state[0], initial.state[0]);
      }
    }
  }
}

// A tile mixes fused runs and scratch runs: segments that end mid-block, on a block boundary,
// on a tile boundary, empty, and a run of small tensors whose straddling blocks fill the most
// the scratch takes at once (2048 elements) and more. The same shard with every segment cut
// further into 250-element pieces (so nearly every block goes through the scratch, as above)
// must give the same bits, and each must send exactly its straddling blocks to the scratch.
TEST(CpuOptimizerTest, Int8FusedAndScratchRunsMix) {
  CpuOptimizer opt(2, kTile);
  const int64_t n = 2 * kTile + 777;
  std::vector<ShardSegment> mixed;
  auto add = [&](int64_t end, float wd) {
    const int64_t begin = mixed.empty() ? 0 : mixed.back().end;
    mixed.push_back({begin, end, wd});
  };
  add(1000, 0.1f);                 // ends mid-block
  add(1000, 0.5f);                 // empty
  add(5 * kQuantBlock, 0.0f);      // ends on a block boundary: no scratch there
  add(kTile, 0.05f);               // ends on the tile boundary
  add(kTile + 5, 0.01f);           // ends 5 into the next tile
  for (int i = 0; i < 100; ++i) {  // 100 tensors of 37 elements: 15 blocks straddle
    add(kTile + 5 + 37 * (i + 1), i % 2 == 0 ? 0.02f : 0.03f);
  }
  add(kTile + 5000, 0.04f);  // ends mid-block
  add(n - 100, 0.0f);        // a long one, then the shard's partial last block
  add(n, 0.07f);
  // The blocks holding 1000, kTile + 5 to kTile + 3705, kTile + 5000 and n - 100.
  ASSERT_EQ(StraddlingBlockElements(mixed, n), (1 + 15 + 1 + 1) * kQuantBlock);
  std::vector<ShardSegment> cut;
  for (const ShardSegment& s : mixed) {
    if (s.begin == s.end) cut.push_back(s);
    for (int64_t b = s.begin; b < s.end; b += 250) {
      cut.push_back({b, std::min(s.end, b + 250), s.weight_decay});
    }
  }
  uint64_t seed = 7500;
  for (const KindCase& k : kKinds) {
    if (StatesOf(k) == 0) continue;
    SCOPED_TRACE(k.name);
    Shard a(k, n, StateDType::kInt8, DType::kBF16, DType::kBF16, ++seed);
    a.segments = mixed;
    Shard b = a;
    b.segments = cut;
    for (int64_t step = 1; step <= 2; ++step) {
      for (Shard* sh : {&a, &b}) {
        sh->FillGrad(step);
        std::vector<ShardSegment> segs;
        opt.Step(MakeHyper(sh->kind, step), sh->View(0, n, segs));
        EXPECT_EQ(opt.last_step_scratch_elements(), StraddlingBlockElements(sh->segments, n))
            << (sh == &a ? "mixed" : "cut");
      }
    }
    EXPECT_EQ(std::memcmp(a.master.data(), b.master.data(), 4 * n), 0) << "master";
    for (int s = 0; s < 2; ++s) {
      EXPECT_EQ(a.state[s], b.state[s]) << "state " << s;
      EXPECT_EQ(a.scale[s], b.scale[s]) << "scales " << s;
    }
    EXPECT_EQ(a.param_out, b.param_out) << "param_out";
    Shard initial(k, n, StateDType::kInt8, DType::kBF16, DType::kBF16, seed);
    EXPECT_NE(a.state[0], initial.state[0]);
    EXPECT_NE(a.param_out, initial.param_out);
  }
}

// Every SIMD target compiled in and supported by this CPU gives the same bits.
TEST(CpuOptimizerTest, AllSimdTargetsAgree) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  const int64_t n = 1000 + 13;
  uint64_t seed = 9000;
  for (const KindCase& k : kKinds) {
    for (DType gd : kGradDTypes) {
      for (StateDType sd : {StateDType::kF32, StateDType::kBF16, StateDType::kInt8}) {
        ++seed;
        const std::optional<DType> pd = gd == DType::kF32 ? std::nullopt : std::optional<DType>(gd);
        std::optional<Shard> base;
        std::string base_target;
        for (int64_t target : targets) {
          hwy::SetSupportedTargetsForTest(target);
          CpuOptimizer opt(1, kTile);
          Shard shard(k, n, sd, gd, pd, seed);
          RunSteps(opt, shard, 1, 2);
          if (&k == &kKinds[0] && gd == DType::kF32 && sd == StateDType::kF32) {
            std::printf("pinned %s: kernels run %s\n", hwy::TargetName(target),
                        CpuOptimizer::SimdTarget().c_str());
          }
          if (!base) {
            base.emplace(shard);
            base_target = CpuOptimizer::SimdTarget();
          } else {
            ExpectSameBits(
                *base, shard,
                fmt::format("{} grad {} {} states: {} vs {}", k.name, DTypeName(gd),
                            StateDTypeName(sd), CpuOptimizer::SimdTarget(), base_target));
          }
        }
        hwy::SetSupportedTargetsForTest(0);
      }
    }
  }
}

// [Note: streaming param_out]: non-temporal param_out stores write the bits ordinary stores do,
// on every SIMD target, for every param dtype and state dtype, with two threads. From a
// param_out aligned to the widest vector every tile's first run streams (runs that start at a
// weight-decay segment boundary mid-tile may not be aligned, and store as usual); one element
// off, none does.
TEST(CpuOptimizerTest, StreamedParamOutEqualsCached) {
  const int64_t n = kSlowBuild ? kTile + 333 : 2 * kTile + 333;
  constexpr uintptr_t kAlign = 256;  // SVE's widest vector
  uint64_t seed = 9500;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    CpuOptimizer opt(2, kTile);
    for (const KindCase& k : kKinds) {
      for (DType pd : {DType::kBF16, DType::kF16, DType::kF32}) {
        for (StateDType sd : {StateDType::kF32, StateDType::kBF16, StateDType::kInt8}) {
          if (sd != StateDType::kF32 && StatesOf(k) == 0) continue;
          for (size_t offset : {size_t{0}, DTypeSize(pd)}) {
            SCOPED_TRACE(fmt::format("{}: {} param_out {} (offset {}) {} states",
                                     CpuOptimizer::SimdTarget(), k.name, DTypeName(pd), offset,
                                     StateDTypeName(sd)));
            ++seed;
            const size_t bytes = size_t(n) * DTypeSize(pd);
            Shard cached(k, n, sd, DType::kBF16, pd, seed);
            Shard streamed = cached;
            std::vector<uint8_t> storage[2];
            uint8_t* out[2];
            for (int s = 0; s < 2; ++s) {
              storage[s].assign(bytes + offset + kAlign, 0xAB);
              const uintptr_t at = reinterpret_cast<uintptr_t>(storage[s].data());
              out[s] = storage[s].data() + ((kAlign - at % kAlign) % kAlign) + offset;
            }
            ASSERT_EQ(reinterpret_cast<uintptr_t>(out[1]) % kAlign, offset);
            for (int64_t step = 1; step <= 2; ++step) {
              int s = 0;
              for (Shard* sh : {&cached, &streamed}) {
                sh->FillGrad(step);
                std::vector<ShardSegment> segs;
                ShardStep st = sh->View(0, n, segs);
                st.param_out = out[s];
                st.param_out_stores = s == 0 ? ParamOutStores::kCached : ParamOutStores::kStreaming;
                ASSERT_EQ(CpuOptimizer::StreamsParamOut(MakeHyper(k, step), st), s == 1);
                opt.Step(MakeHyper(k, step), st);
                ++s;
              }
            }
            ExpectSameBits(cached, streamed, "master and states");
            EXPECT_EQ(std::memcmp(out[0], out[1], bytes), 0) << "param_out";
            // The copy must have been written for the comparison to mean something.
            EXPECT_NE(std::count(out[1], out[1] + bytes, uint8_t{0xAB}), int64_t(bytes));
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// kAuto streams exactly when the step's arrays exceed a quarter of the last-level cache.
TEST(CpuOptimizerTest, AutoStreamsParamOutBeyondTheCacheResidentLimit) {
  const int64_t llc = CpuOptimizer::CacheResidentLimitBytes();
  ASSERT_GT(llc, 0);
  EXPECT_EQ(llc, CpuOptimizer::LastLevelCacheBytes() / 4);
  OptimizerHyper adamw = MakeHyper(kKinds[0], 1);
  uint16_t dummy = 0;
  ShardStep st;
  st.state_dtype = StateDType::kF32;
  st.grad_dtype = DType::kBF16;
  st.param_out = &dummy;  // never stepped: only the decision is asked
  st.param_dtype = DType::kBF16;
  // master 4 + grad 2 + param_out 2 + two fp32 states 8 bytes per element.
  st.n = 1000;
  EXPECT_EQ(CpuOptimizer::StepWorkingSetBytes(adamw, st), 16 * 1000);
  st.n = llc / 16;
  EXPECT_FALSE(CpuOptimizer::StreamsParamOut(adamw, st));
  st.n = llc / 16 + 1;
  EXPECT_TRUE(CpuOptimizer::StreamsParamOut(adamw, st));
  // A set limit replaces the cache's quarter.
  st.n = 1000;
  st.cache_resident_bytes = 16 * 1000;
  EXPECT_FALSE(CpuOptimizer::StreamsParamOut(adamw, st));
  st.cache_resident_bytes = 16 * 1000 - 1;
  EXPECT_EQ(CpuOptimizer::CacheResidentLimitBytes(st), 16 * 1000 - 1);
  EXPECT_TRUE(CpuOptimizer::StreamsParamOut(adamw, st));
  st.cache_resident_bytes = kAutoCacheResident;
  EXPECT_EQ(CpuOptimizer::CacheResidentLimitBytes(st), llc);
  st.param_out_stores = ParamOutStores::kCached;
  EXPECT_FALSE(CpuOptimizer::StreamsParamOut(adamw, st));
  st.param_out_stores = ParamOutStores::kStreaming;
  st.n = 1;
  EXPECT_TRUE(CpuOptimizer::StreamsParamOut(adamw, st));
  st.param_out = nullptr;
  EXPECT_FALSE(CpuOptimizer::StreamsParamOut(adamw, st));
  // int8 states count their codes and scales; SGD without momentum has none.
  st.param_out = &dummy;
  st.n = 2 * kQuantBlock;
  st.state_dtype = StateDType::kInt8;
  EXPECT_EQ(CpuOptimizer::StepWorkingSetBytes(adamw, st), st.n * 8 + 2 * (st.n + 2 * 4));
  EXPECT_EQ(CpuOptimizer::StepWorkingSetBytes(MakeHyper(kKinds[2], 1), st), st.n * 8);
}

// The loop prefetches a step ahead exactly while that step lies inside the range.
TEST(CpuOptimizerTest, PrefetchingEndKeepsPrefetchesInsideTheRange) {
  using internal::PrefetchingEnd;
  for (size_t step : {size_t{2}, size_t{8}, size_t{32}, size_t{128}}) {
    for (size_t prefetch : {size_t{1}, size_t{37}, size_t{256}, size_t{4096}}) {
      for (size_t in_range : {size_t{0}, step, prefetch, prefetch + step - 1, prefetch + step,
                              prefetch + step + 1, size_t{65536}}) {
        SCOPED_TRACE(fmt::format("step {} prefetch {} range {}", step, prefetch, in_range));
        const size_t end = PrefetchingEnd(prefetch, in_range, step);
        // Every step before `end` prefetches inside the range, the first one after it would not.
        if (end > 0) {
          EXPECT_LE(end - 1 + prefetch + step, in_range);
        }
        EXPECT_GT(end + prefetch + step, in_range);
      }
    }
    EXPECT_EQ(PrefetchingEnd(0, 65536, step), 0u);
  }
}

// [Note: software prefetch]: prefetching any distance ahead writes the bits no prefetching
// does, on every SIMD target, kind and state dtype, with two threads; the distances reach
// inside a step, an int8 block, a scratch run (2048) and a tile, up to the end of each range.
TEST(CpuOptimizerTest, PrefetchingDoesNotChangeResults) {
  const int64_t n = kSlowBuild ? kTile + 333 : 2 * kTile + 333;
  const int64_t distances[] = {1, 37, CpuOptimizer::kDefaultPrefetchElements, 2048 - 64,
                               kTile - 64};
  uint64_t seed = 9700;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    CpuOptimizer opt(2, kTile);
    for (const KindCase& k : kKinds) {
      for (StateDType sd : {StateDType::kF32, StateDType::kBF16, StateDType::kInt8}) {
        if (sd != StateDType::kF32 && StatesOf(k) == 0) continue;
        ++seed;
        const Shard initial(k, n, sd, DType::kBF16, DType::kBF16, seed);
        Shard none = initial;
        auto run = [&](Shard& sh, int64_t distance) {
          for (int64_t step = 1; step <= 2; ++step) {
            sh.FillGrad(step);
            std::vector<ShardSegment> segs;
            ShardStep st = sh.View(0, n, segs);
            st.prefetch_elements = distance;
            ASSERT_EQ(CpuOptimizer::PrefetchElements(st), distance);
            opt.Step(MakeHyper(k, step), st);
          }
        };
        run(none, 0);
        ASSERT_NE(none.master, initial.master);  // the steps did something
        for (int64_t distance : distances) {
          SCOPED_TRACE(fmt::format("{}: {} {} states, prefetch {}", CpuOptimizer::SimdTarget(),
                                   k.name, StateDTypeName(sd), distance));
          Shard prefetched = initial;
          run(prefetched, distance);
          ExpectSameBits(none, prefetched, "prefetched");
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// On x86, whether /proc/cpuinfo's vendor_id is GenuineIntel (read independently of the CPUID
// check under test); nullopt where it has no vendor_id. Elsewhere false: auto never prefetches.
#if defined(__x86_64__) || defined(__i386__)
std::optional<bool> CpuinfoSaysIntel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("vendor_id", 0) == 0) return line.find("GenuineIntel") != std::string::npos;
  }
  return std::nullopt;
}
#else
std::optional<bool> CpuinfoSaysIntel() { return false; }
#endif

// kAutoPrefetch prefetches kDefaultPrefetchElements ahead exactly when this CPU is one where
// that pays, whatever the step's size (neither the size nor the cache limit matters); a set
// distance is kept.
TEST(CpuOptimizerTest, AutoPrefetchOnIntelWhateverTheSize) {
  const int64_t auto_distance =
      CpuOptimizer::AutoPrefetchesOnThisCpu() ? CpuOptimizer::kDefaultPrefetchElements : 0;
  ShardStep st;
  ASSERT_EQ(st.prefetch_elements, kAutoPrefetch);  // the default
  for (int64_t n : {int64_t{1}, int64_t{1} << 20, int64_t{1} << 40}) {
    for (int64_t limit : {kAutoCacheResident, int64_t{0}, int64_t{1} << 50}) {
      st.n = n;
      st.cache_resident_bytes = limit;
      EXPECT_EQ(CpuOptimizer::PrefetchElements(st), auto_distance) << n << " " << limit;
    }
  }
  for (int64_t set : {int64_t{0}, int64_t{1}, int64_t{1000}, CpuOptimizer::kMaxPrefetchElements}) {
    st.prefetch_elements = set;
    EXPECT_EQ(CpuOptimizer::PrefetchElements(st), set);
  }
  if (const std::optional<bool> intel = CpuinfoSaysIntel()) {
    EXPECT_EQ(CpuOptimizer::AutoPrefetchesOnThisCpu(), *intel);
  }
}

// param_out conversions and gradient loads agree with runtime/base/dtype.h on every bit
// pattern that matters: SGD with lr = 0 leaves the master as is (param_out = round(master)); SGD
// with lr = 1 from w = 0 gives w = -g exactly (the gradient as loaded).
TEST(CpuOptimizerTest, ConversionsMatchScalarDtype) {
  const KindCase sgd{"SGD", OptimizerKind::kSgd, 0.0f};
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    CpuOptimizer opt(2, kTile);
    SCOPED_TRACE(CpuOptimizer::SimdTarget());
    // Rounding: random bit patterns plus the edges of both formats.
    std::vector<float> values = {0.0f,
                                 -0.0f,
                                 std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity(),
                                 std::numeric_limits<float>::quiet_NaN(),
                                 -std::nanf("0x123"),
                                 std::bit_cast<float>(0x7f800001u),
                                 65504.0f,
                                 65519.99f,
                                 65520.0f,
                                 1e-8f,
                                 5.96e-8f,
                                 2.98e-8f,
                                 6.1e-5f,
                                 6.097e-5f,
                                 1e-40f,
                                 3e38f};
    for (float v : {1.0f, 1.5f, 2.0f, 0.1f}) {
      const uint32_t u = std::bit_cast<uint32_t>(v);
      for (uint32_t d :
           {0x7fffu, 0x8000u, 0x8001u, 0x17fffu, 0x18000u, 0xfffu, 0x1000u, 0x1001u, 0x3000u}) {
        values.push_back(std::bit_cast<float>(u + d));
      }
    }
    Rng rng(77);
    while (values.size() < 20011) values.push_back(std::bit_cast<float>(uint32_t(rng.Next())));
    for (DType pd : {DType::kBF16, DType::kF16, DType::kF32}) {
      Shard shard(sgd, int64_t(values.size()), StateDType::kF32, DType::kF32, pd, 1);
      shard.master = values;
      std::fill(shard.grad.begin(), shard.grad.end(), 0);  // finite: w - 0 * g = w
      shard.segments = {{0, shard.n, 0.0f}};
      OptimizerHyper h = MakeHyper(sgd, 1);
      h.lr = 0.0f;
      std::vector<ShardSegment> segs;
      opt.Step(h, shard.View(0, shard.n, segs));
      Mismatches bad;
      CheckParamOut(shard, bad);
    }
    // Gradient loads: all 65536 patterns of bf16 and f16.
    for (DType gd : {DType::kBF16, DType::kF16}) {
      Shard shard(sgd, 65536, StateDType::kF32, gd, std::nullopt, 1);
      for (int64_t i = 0; i < shard.n; ++i) {
        const uint16_t b = uint16_t(i);
        std::memcpy(shard.grad.data() + 2 * i, &b, 2);
      }
      std::fill(shard.master.begin(), shard.master.end(), 0.0f);
      shard.segments = {{0, shard.n, 0.0f}};
      OptimizerHyper h = MakeHyper(sgd, 1);
      h.lr = 1.0f;
      std::vector<ShardSegment> segs;
      ShardStep st = shard.View(0, shard.n, segs);
      st.grad_scale = 1.0f;
      opt.Step(h, st);
      Mismatches bad;
      for (int64_t i = 0; i < shard.n; ++i) {
        const float want = LoadAsFloat(shard.grad.data(), gd, i);
        const float got = -shard.master[i];
        if (std::isnan(want) ? !std::isnan(got) : got != want) {
          bad.Add(
              fmt::format("{} grad {:#06x}: loaded {}, expected {}", DTypeName(gd), i, got, want));
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// AdamW and Adam keep the scalar engine reference's operation order, so they agree with it bit
// for bit (both are compiled with -ffp-contract=off: optimizers/CMakeLists.txt).
TEST(CpuOptimizerTest, AdamBitIdenticalToScalarEngineReference) {
  CpuOptimizer opt(2, kTile);
  uint64_t seed = 7000;
  for (const KindCase& k : {kKinds[0], kKinds[1]}) {
    for (DType gd : kGradDTypes) {
      SCOPED_TRACE(fmt::format("{} grad {}", k.name, DTypeName(gd)));
      const int64_t n = kTile + 333;
      Shard kernel(k, n, StateDType::kF32, gd, DType::kBF16, ++seed);
      Shard scalar(k, n, StateDType::kF32, gd, DType::kBF16, seed);
      for (int64_t step = 1; step <= 3; ++step) {
        RunSteps(opt, kernel, step, 1);
        scalar.FillGrad(step);
        const OptimizerHyper h = MakeHyper(k, step);
        for (const ShardSegment& seg : scalar.segments) {
          AdamWHyper a;
          a.lr = h.lr;
          a.beta1 = h.beta1;
          a.beta2 = h.beta2;
          a.eps = h.eps;
          a.weight_decay = seg.weight_decay;
          a.decoupled = k.kind == OptimizerKind::kAdamW;
          a.step = step;
          const int64_t b = seg.begin;
          AdamWReferenceStep(
              a, scalar.master.data() + b, reinterpret_cast<float*>(scalar.state[0].data()) + b,
              reinterpret_cast<float*>(scalar.state[1].data()) + b,
              scalar.grad.data() + b * DTypeSize(gd), gd, 0.5f, scalar.param_out.data() + 2 * b,
              DType::kBF16, size_t(seg.end - seg.begin));
        }
      }
      ExpectSameBits(kernel, scalar, "kernel vs AdamWReferenceStep");
    }
  }
}

TEST(CpuOptimizerTest, EmptyShardAndNames) {
  CpuOptimizer opt(3, kTile);
  EXPECT_EQ(opt.threads(), 3);
  ShardStep empty;
  opt.Step(MakeHyper(kKinds[0], 1), empty);  // nothing to do, nothing touched
  EXPECT_EQ(OptimizerKindName(OptimizerKind::kAdamW), "AdamW");
  EXPECT_EQ(OptimizerKindName(OptimizerKind::kLion), "Lion");
  EXPECT_EQ(StateDTypeName(StateDType::kInt8), "int8");
  EXPECT_FALSE(CpuOptimizer::SimdTarget().empty());
}

TEST(CpuOptimizerDeathTest, SegmentsMustCoverTheShard) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Shard shard(kKinds[0], 100, StateDType::kF32, DType::kF32, std::nullopt, 3);
  std::vector<ShardSegment> segs;
  ShardStep st = shard.View(0, 100, segs);
  const ShardSegment short_segs[] = {{0, 50, 0.1f}};
  st.segments = short_segs;
  EXPECT_DEATH(CpuOptimizer(1).Step(MakeHyper(kKinds[0], 1), st), "segments end at 50");
  const ShardSegment bad_group[] = {{0, shard.n, 0.1f, 2}};
  st.segments = bad_group;
  EXPECT_DEATH(CpuOptimizer(1).Step(MakeHyper(kKinds[0], 1), st), "names parameter group 2");
  st = shard.View(0, 100, segs);
  st.state[1] = nullptr;
  EXPECT_DEATH(CpuOptimizer(1).Step(MakeHyper(kKinds[0], 1), st), "needs state 1");
  st = shard.View(0, 100, segs);
  st.prefetch_elements = -2;
  EXPECT_DEATH(CpuOptimizer(1).Step(MakeHyper(kKinds[0], 1), st), "prefetch_elements = -2");
  st.prefetch_elements = CpuOptimizer::kMaxPrefetchElements + 1;
  EXPECT_DEATH(CpuOptimizer(1).Step(MakeHyper(kKinds[0], 1), st), "prefetch_elements = 1048577");
  st.prefetch_elements = kAutoPrefetch;
  st.cache_resident_bytes = -2;
  EXPECT_DEATH(CpuOptimizer(1).Step(MakeHyper(kKinds[0], 1), st), "cache_resident_bytes = -2");
  EXPECT_DEATH(CpuOptimizer(1, 1024), "tile_elements = 1024");
  EXPECT_DEATH(CpuOptimizer(1, 3 * 4096), "tile_elements = 12288");
  EXPECT_DEATH(CpuOptimizer(1, int64_t{1} << 31), "tile_elements = 2147483648");
}

}  // namespace
}  // namespace zs

namespace zs {
namespace {

// [Note: fused bf16 states]: the in-register path equals decode -> fp32 update -> encode.
// The shard spans three 64K blocks of indices (the kernel hashes each with its block key:
// [Note: hashing within a 64K block]; the codec hashes every index in full), and its second
// segment starts 5 short of a block boundary.
TEST(CpuOptimizerTest, FusedBf16StatesEqualDecodeUpdateEncode) {
  const int64_t n = 2 * 65536 + 5003;
  // Tiles of 16K, and (one thread, so not made smaller) of 2^17 and the largest: their ranges
  // cross 64K blocks.
  CpuOptimizer small_tiles(2, kTile), large_tiles(1, int64_t{1} << 17),
      largest_tiles(1, CpuOptimizer::kMaxTileElements);
  const std::pair<OptimizerKind, float> kinds[] = {{OptimizerKind::kAdamW, 0.9f},
                                                   {OptimizerKind::kSgd, 0.9f},
                                                   {OptimizerKind::kAdagrad, 0.9f},
                                                   {OptimizerKind::kLion, 0.9f}};
  for (CpuOptimizer* tiles : {&small_tiles, &large_tiles, &largest_tiles}) {
    CpuOptimizer& opt = *tiles;
    ASSERT_EQ(opt.StepTileElements(n), opt.tile_elements());
    for (auto [kind, beta1] : kinds) {
      OptimizerHyper h;
      h.kind = kind;
      h.beta1 = beta1;
      h.lr = 1e-2f;
      h.step = 3;
      const int states = NumStates(kind, beta1);
      std::vector<float> master(n), grad(n), fp32_state[2];
      for (int64_t i = 0; i < n; ++i) {
        master[i] = std::sin(float(i) * 0.37f);
        grad[i] = std::cos(float(i) * 0.11f) * 1e-2f;
      }
      std::vector<uint16_t> codes[2];
      for (int k = 0; k < states; ++k) {
        std::vector<float> init(n);
        for (int64_t i = 0; i < n; ++i) init[i] = 1e-3f * (1.5f + std::sin(float(i * (k + 3))));
        codes[k].resize(n);
        EncodeState(StateDType::kBF16, init.data(), 0, n, codes[k].data(), nullptr, 5, 0, k);
        fp32_state[k].resize(n);
        DecodeState(StateDType::kBF16, codes[k].data(), nullptr, 0, n, fp32_state[k].data());
      }
      const std::vector<ShardSegment> segments = {{0, 65536 - 5, 0.0f}, {65536 - 5, n, 0.1f}};
      // A: fused.
      std::vector<float> master_a = master;
      ShardStep a;
      a.n = n;
      a.master = master_a.data();
      for (int k = 0; k < states; ++k) a.state[k] = codes[k].data();
      a.state_dtype = StateDType::kBF16;
      a.grad = grad.data();
      a.segments = segments;
      a.seed = 99;
      opt.Step(h, a);
      // B: fp32 states, then encoded with the same stream.
      std::vector<float> master_b = master;
      ShardStep b = a;
      b.master = master_b.data();
      for (int k = 0; k < states; ++k) b.state[k] = fp32_state[k].data();
      b.state_dtype = StateDType::kF32;
      opt.Step(h, b);
      EXPECT_EQ(std::memcmp(master_a.data(), master_b.data(), n * sizeof(float)), 0)
          << OptimizerKindName(kind);
      for (int k = 0; k < states; ++k) {
        std::vector<uint16_t> encoded(n);
        EncodeState(StateDType::kBF16, fp32_state[k].data(), 0, n, encoded.data(), nullptr, 99,
                    h.step, k);
        EXPECT_EQ(encoded, codes[k])
            << OptimizerKindName(kind) << " state " << k << ", tiles of " << opt.tile_elements();
      }
    }
  }
}

// CpuOptimizer's tiles start at aligned indices (a tile crosses 64K blocks only when it is
// larger, at a block boundary), but the kernel's contract allows any range. One that starts 37
// short of a block boundary beyond 2^32 runs its unaligned first elements through the padded step
// (the whole hash) and then crosses into the next block with a new block key ([Note: hashing within
// a 64K block]), on every target. The fused bf16 path must still equal the fp32 update followed by
// the codec's encode.
TEST(CpuOptimizerTest, FusedBf16KernelRangeAcrossA64KBlock) {
  const int64_t first = (int64_t{1} << 32) + 3 * 65536 - 37;
  const int64_t n = 300;
  const uint64_t seed = 41;
  OptimizerHyper h;
  h.kind = OptimizerKind::kAdamW;
  h.lr = 1e-2f;
  h.step = 4;
  const internal::KernelConstants c = internal::MakeKernelConstants(h);
  std::vector<float> master(n), grad(n), init[2];
  for (int64_t i = 0; i < n; ++i) {
    master[i] = std::sin(float(i) * 0.37f);
    grad[i] = std::cos(float(i) * 0.11f) * 1e-2f;
  }
  std::vector<uint16_t> codes[2];
  std::vector<float> fp32_state[2];
  for (int k = 0; k < 2; ++k) {
    init[k].resize(n);
    for (int64_t i = 0; i < n; ++i) init[k][i] = 1e-3f * (1.5f + std::sin(float(i * (k + 3))));
    codes[k].resize(n);
    EncodeState(StateDType::kBF16, init[k].data(), first, n, codes[k].data(), nullptr, seed, 1, k);
  }
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    internal::KernelRange a;
    a.n = n;
    std::vector<float> master_a = master, master_b = master;
    std::vector<uint16_t> codes_a[2] = {codes[0], codes[1]};
    a.master = master_a.data();
    a.state0 = codes_a[0].data();
    a.state1 = codes_a[1].data();
    a.state_dtype = StateDType::kBF16;
    a.sr_key = sr::MakeSrKey(seed, h.step, uint32_t(uint64_t(first) >> 32));
    a.index_lo = uint32_t(first);
    a.grad = grad.data();
    a.weight_decay = 0.1f;
    internal::RunOptimizerKernel(c, a);
    internal::KernelRange b = a;
    b.master = master_b.data();
    for (int k = 0; k < 2; ++k) {
      fp32_state[k].resize(n);
      DecodeState(StateDType::kBF16, codes[k].data(), nullptr, first, n, fp32_state[k].data());
    }
    b.state0 = fp32_state[0].data();
    b.state1 = fp32_state[1].data();
    b.state_dtype = StateDType::kF32;
    internal::RunOptimizerKernel(c, b);
    EXPECT_EQ(std::memcmp(master_a.data(), master_b.data(), n * sizeof(float)), 0);
    for (int k = 0; k < 2; ++k) {
      std::vector<uint16_t> encoded(n);
      EncodeState(StateDType::kBF16, fp32_state[k].data(), first, n, encoded.data(), nullptr,
                  seed, h.step, k);
      EXPECT_EQ(encoded, codes_a[k]) << "state " << k;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// NaN gradients whose payload is all ones propagate into m and v with that payload; the fused
// stochastic rounding must keep them NaN (adding the random bits would wrap 0xffffffff to +0),
// and finite neighbours in the same vectors must stay finite, on every target.
TEST(CpuOptimizerTest, FusedBf16StatesKeepNaNPayloads) {
  const int64_t n = 67;
  const uint32_t nans[] = {0xffffffffu, 0x7fffffffu, 0x7fc00000u, 0xffc00001u};
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(CpuOptimizer::SimdTarget());
    CpuOptimizer opt(1, kTile);
    OptimizerHyper h;
    h.kind = OptimizerKind::kAdamW;
    h.step = 2;
    std::vector<float> master(n, 0.5f), grad(n);
    for (int64_t i = 0; i < n; ++i) {
      grad[i] = i % 5 == 0 ? std::bit_cast<float>(nans[(i / 5) % 4]) : 1e-3f * float(i - 30);
    }
    std::vector<uint16_t> codes[2] = {std::vector<uint16_t>(n, 0x3a83),   // about 1e-3
                                      std::vector<uint16_t>(n, 0x358c)};  // about 1e-6
    const std::vector<ShardSegment> segments = {{0, n, 0.0f}};
    ShardStep st;
    st.n = n;
    st.master = master.data();
    st.state[0] = codes[0].data();
    st.state[1] = codes[1].data();
    st.state_dtype = StateDType::kBF16;
    st.grad = grad.data();
    st.segments = segments;
    st.seed = 4;
    opt.Step(h, st);
    for (int k = 0; k < 2; ++k) {
      std::vector<float> decoded(n);
      DecodeState(StateDType::kBF16, codes[k].data(), nullptr, 0, n, decoded.data());
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(std::isnan(decoded[i]), i % 5 == 0)
            << "state " << k << " element " << i << " = " << decoded[i];
      }
    }
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(std::isnan(master[i]), i % 5 == 0) << i;
  }
  hwy::SetSupportedTargetsForTest(0);
}

// [Note: NaN-free stores]: the bf16 roundings skip their NaN select when the new weights (and
// Lion's momentum) hold no NaN. Wherever a NaN arises (from the master, the gradient or either
// state), the bf16 states and param_out must hold NaN exactly where an fp32-state step of the
// same values does, for every kind and target.
TEST(CpuOptimizerTest, Bf16RoundingKeepsNaNWhereverItArises) {
  const int64_t n = 97;
  const float nan = std::bit_cast<float>(0xffffffffu);  // all-ones payload: the hardest case
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    CpuOptimizer opt(1, kTile);
    for (const KindCase& k : kKinds) {
      const int states = StatesOf(k);
      if (states == 0) continue;
      SCOPED_TRACE(fmt::format("{} on {}", k.name, CpuOptimizer::SimdTarget()));
      for (int64_t step : {1, 2}) {  // SGD's first step writes its buffer without reading it
      SCOPED_TRACE(fmt::format("step {}", step));
      const OptimizerHyper h = MakeHyper(k, step);
      std::vector<float> master(n), grad(n), state_f32[2];
      std::vector<uint16_t> state_bf16[2];
      for (int64_t i = 0; i < n; ++i) {
        master[i] = i % 7 == 3 ? nan : 0.5f - 0.01f * float(i % 9);
        grad[i] = i % 11 == 5 ? nan : 1e-3f * float(i - 40);
      }
      for (int s = 0; s < states; ++s) {
        state_bf16[s].resize(n);
        state_f32[s].resize(n);
        for (int64_t i = 0; i < n; ++i) {
          // bf16-exact values (so both runs start equal), positive for second moments.
          const uint16_t code = i % 13 == 2 + s ? 0xffff : uint16_t(0x3a83 + (i % 5) * 0x40);
          state_bf16[s][i] = code;
          state_f32[s][i] = std::bit_cast<float>(uint32_t(code) << 16);
        }
      }
      auto run = [&](StateDType sd, std::vector<float>& w, void* s0, void* s1,
                     std::vector<uint16_t>& out) {
        const std::vector<ShardSegment> segments = {{0, n, 0.01f}};
        ShardStep st;
        st.n = n;
        st.master = w.data();
        st.state[0] = s0;
        st.state[1] = s1;
        st.state_dtype = sd;
        st.grad = grad.data();
        st.param_out = out.data();
        st.param_dtype = DType::kBF16;
        st.segments = segments;
        st.seed = 4;
        opt.Step(h, st);
      };
      std::vector<float> w32 = master, w16 = master;
      std::vector<uint16_t> out32(n), out16(n);
      run(StateDType::kF32, w32, state_f32[0].data(), states > 1 ? state_f32[1].data() : nullptr,
          out32);
      run(StateDType::kBF16, w16, state_bf16[0].data(),
          states > 1 ? state_bf16[1].data() : nullptr, out16);
      int64_t nans = 0;
      for (int64_t i = 0; i < n; ++i) {
        auto bf16_nan = [](uint16_t b) { return (b & 0x7fff) > 0x7f80; };
        EXPECT_EQ(bf16_nan(out16[i]), std::isnan(w32[i])) << "param_out " << i;
        EXPECT_EQ(bf16_nan(out32[i]), std::isnan(w32[i])) << "fp32-state param_out " << i;
        for (int s = 0; s < states; ++s) {
          EXPECT_EQ(bf16_nan(state_bf16[s][i]), std::isnan(state_f32[s][i]))
              << "state " << s << " element " << i;
          nans += std::isnan(state_f32[s][i]);
        }
      }
      EXPECT_GT(nans, 0) << "no NaN reached a state: the test checks nothing";
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace zs
