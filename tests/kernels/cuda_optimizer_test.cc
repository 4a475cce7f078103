// The fused multi-tensor optimizer kernel (kernels/cuda/fused_optimizer.h) and its CPU
// reference (kernels/fused_optimizer_reference.h).
// - Against a float64 reference written here from optimizers/optimizer_spec.h's update rules
//   (fp32 states). The reference also carries a first-order bound on the error of fp32
//   arithmetic (unit roundoff 2^-24 per operation, propagated through the same operations),
//   and every element must lie within twice that bound: wrong constants, a missing bias
//   correction or a misplaced weight decay are many bounds away. param_out must be the exact
//   round-to-nearest-even cast of the new master. Tensors sit at unaligned offsets inside
//   shared buffers whose other elements must stay untouched. The CPU reference passes the
//   same checks without a device.
// - The GPU against the CPU reference bit for bit, for fp32, bf16 (stochastic rounding, a
//   tensor across a 2^32 boundary of shard indices) and int8 states, on inline and long lists.
// Tests that launch kernels skip (GTEST_SKIP) when there is no CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/fused_optimizer.h"
#include "kernels/float_bits.h"
#include "kernels/fused_optimizer_reference.h"
#include "tests/kernels/cuda_test_support.h"

namespace zs::kernels {
namespace {

template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& host) : n_(host.size()) {
    if (cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(1, n_) * sizeof(T)) !=
        cudaSuccess) {
      ptr_ = nullptr;
      return;
    }
    if (n_ > 0) cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceVector() { cudaFree(ptr_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;

  T* get() const { return ptr_; }
  std::vector<T> ToHost() const {
    std::vector<T> out(n_);
    if (n_ > 0) cudaMemcpy(out.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return out;
  }

 private:
  size_t n_;
  T* ptr_ = nullptr;
};

// ---- float64 reference with an error bound -------------------------------------------------

constexpr double kU = 0x1p-24;  // fp32 unit roundoff

// A value computed exactly (in double) and a bound on how far the kernel's fp32 evaluation of
// the same expression may be from it.
struct Approx {
  double v = 0;
  double e = 0;
};
Approx Exact(double v) { return {v, 0}; }
Approx RoundedOnce(double v) { return {v, kU * std::fabs(v)}; }  // a host constant cast to f32
Approx Add(Approx a, Approx b) {
  const double v = a.v + b.v;
  return {v, a.e + b.e + kU * std::fabs(v)};
}
Approx Sub(Approx a, Approx b) { return Add(a, {-b.v, b.e}); }
Approx Mul(Approx a, Approx b) {
  const double v = a.v * b.v;
  return {v, std::fabs(a.v) * b.e + std::fabs(b.v) * a.e + a.e * b.e + kU * std::fabs(v)};
}
Approx Div(Approx a, Approx b) {
  const double v = a.v / b.v;
  return {v, (a.e + std::fabs(v) * b.e) / (std::fabs(b.v) - b.e) + kU * std::fabs(v)};
}
Approx Sqrt(Approx a) {
  const double v = std::sqrt(a.v);
  return {v, a.e / (v + std::sqrt(std::max(0.0, a.v - a.e))) + kU * v};
}

struct Case {
  const char* name;
  FusedOptimizerKind kind;
  float beta1;
  float beta2;
  bool nesterov;
  int64_t step;
  FusedGradType grad_type;
  FusedParamType param_type;
};

struct ElementRef {
  Approx w, s0, s1;
  bool sign_ambiguous = false;  // Lion: the sign's argument is within its error of zero
};

// One element, optimizer_spec.h's rules in double. g is the stored gradient as a float.
ElementRef Reference(const FusedOptimizerHyper& h, float wd_f, float w_f, float s0_f, float s1_f,
                     float g_f) {
  const Approx lr = Exact(h.lr), wd = Exact(wd_f), b1 = Exact(h.beta1), b2 = Exact(h.beta2);
  const Approx omb1 = RoundedOnce(1.0 - double(h.beta1)), omb2 = RoundedOnce(1.0 - double(h.beta2));
  const Approx eps = Exact(h.eps);
  Approx w = Exact(w_f), s0 = Exact(s0_f), s1 = Exact(s1_f);
  Approx g = Mul(Exact(g_f), Exact(h.grad_scale));
  const Approx decay = Sub(Exact(1.0), Mul(lr, wd));
  ElementRef r;
  switch (h.kind) {
    case FusedOptimizerKind::kAdamW:
    case FusedOptimizerKind::kAdam: {
      if (h.kind == FusedOptimizerKind::kAdamW) {
        w = Mul(w, decay);
      } else {
        g = Add(g, Mul(wd, w));
      }
      s0 = Add(Mul(b1, s0), Mul(omb1, g));
      s1 = Add(Mul(b2, s1), Mul(omb2, Mul(g, g)));
      const double bc1 = 1.0 - std::pow(double(h.beta1), double(h.step));
      const double bc2 = 1.0 - std::pow(double(h.beta2), double(h.step));
      const Approx step_size = RoundedOnce(double(h.lr) / bc1);
      const Approx denom = Add(Mul(Sqrt(s1), RoundedOnce(1.0 / std::sqrt(bc2))), eps);
      w = Sub(w, Div(Mul(step_size, s0), denom));
      break;
    }
    case FusedOptimizerKind::kSgd:
      g = Add(g, Mul(wd, w));
      if (h.beta1 == 0.0f) {
        w = Sub(w, Mul(lr, g));
      } else {
        s0 = h.step == 1 ? g : Add(Mul(b1, s0), g);
        w = Sub(w, Mul(lr, h.nesterov ? Add(g, Mul(b1, s0)) : s0));
      }
      break;
    case FusedOptimizerKind::kAdagrad:
      g = Add(g, Mul(wd, w));
      s0 = Add(s0, Mul(g, g));
      w = Sub(w, Div(Mul(lr, g), Add(Sqrt(s0), eps)));
      break;
    case FusedOptimizerKind::kLion: {
      w = Mul(w, decay);
      const Approx c = Add(Mul(b1, s0), Mul(omb1, g));
      r.sign_ambiguous = std::fabs(c.v) <= 2 * c.e;
      const double sign = c.v > 0 ? 1.0 : (c.v < 0 ? -1.0 : 0.0);
      w = Sub(w, Mul(lr, Exact(sign)));
      s0 = Add(Mul(b2, s0), Mul(omb2, g));
      break;
    }
  }
  r.w = w;
  r.s0 = s0;
  r.s1 = s1;
  return r;
}

uint16_t StoreHalf(float v, bool bf16) { return bf16 ? FloatToBF16Bits(v) : FloatToF16Bits(v); }
float LoadHalf(uint16_t v, bool bf16) { return bf16 ? BF16BitsToFloat(v) : F16BitsToFloat(v); }

// Where each tensor of a list lives inside the shared buffers. Every third tensor starts on an
// 8-element boundary (vector path from element 0), every third one at an odd offset (a scalar
// head, then vectors), and every third one has its gradient one element off the others (no
// common alignment: the scalar fallback).
struct Layout {
  std::vector<size_t> offset, grad_offset;
  size_t total = 0;
};

Layout MakeLayout(const std::vector<size_t>& sizes) {
  Layout l;
  size_t cursor = 3;  // a guard before the first tensor
  for (size_t i = 0; i < sizes.size(); ++i) {
    size_t off = (cursor + 7) / 8 * 8 + 8;   // aligned, at least 5 guard elements between
    if (i % 3 != 0) off += 1 + 2 * (i % 4);  // odd offsets
    l.offset.push_back(off);
    l.grad_offset.push_back(i % 3 == 2 ? off + 1 : off);
    cursor = off + sizes[i] + 1;
  }
  l.total = cursor + 11;
  return l;
}

class Uniform {
 public:
  explicit Uniform(uint32_t seed) : rng_(seed) {}
  // |x| in [lo, hi), a random sign unless positive.
  float Next(float lo, float hi, bool positive = false) {
    const float x = std::uniform_real_distribution<float>(lo, hi)(rng_);
    return positive || (rng_() & 1) ? x : -x;
  }

 private:
  std::mt19937 rng_;
};

// Up to kMaxMessages descriptions of failures, and their count.
struct Failures {
  static constexpr int kMaxMessages = 8;
  int count = 0;
  std::ostringstream text;
  void Add(const std::string& what) {
    if (count++ < kMaxMessages) text << what << "\n";
  }
};

FusedOptimizerHyper HyperFor(const Case& c) {
  FusedOptimizerHyper h;
  h.kind = c.kind;
  h.lr = c.kind == FusedOptimizerKind::kLion ? 3e-3f : 1e-2f;
  h.beta1 = c.beta1;
  h.beta2 = c.beta2;
  h.eps = 1e-8f;
  h.nesterov = c.nesterov;
  h.step = c.step;
  h.grad_scale = 0.375f;
  h.grad_type = c.grad_type;
  h.param_type = c.param_type;
  return h;
}

// Where a launch runs: on the GPU, or through its CPU reference (which must give the same
// bits, so the float64 checks below hold for both; the reference's run here needs no device).
enum class Runner { kGpu, kCpuReference };

// Runs one launch over tensors of `sizes` and checks every element of every buffer.
void RunAndCheck(const Case& c, const std::vector<size_t>& sizes, uint32_t seed, Runner runner) {
  const FusedOptimizerHyper h = HyperFor(c);
  const Layout layout = MakeLayout(sizes);
  const size_t total = layout.total;
  const bool grad16 = c.grad_type != FusedGradType::kF32;
  const bool grad_bf16 = c.grad_type == FusedGradType::kBF16;
  const bool param_bf16 = c.param_type == FusedParamType::kBF16;

  Uniform rnd(seed);
  std::vector<float> master(total), s0(total), s1(total), grad32(total + 1);
  std::vector<uint16_t> grad16v(total + 1), param(total);
  for (size_t i = 0; i < total; ++i) {
    master[i] = rnd.Next(0.05f, 2.0f);
    s0[i] = c.kind == FusedOptimizerKind::kAdagrad ? rnd.Next(1e-3f, 1.0f, true)
                                                   : rnd.Next(1e-3f, 0.5f);
    s1[i] = rnd.Next(1e-6f, 1e-2f, true);
    param[i] = StoreHalf(rnd.Next(0.05f, 2.0f), param_bf16);
  }
  for (size_t i = 0; i < total + 1; ++i) {
    const float g = rnd.Next(1e-3f, 2.0f);
    grad32[i] = g;
    grad16v[i] = StoreHalf(g, grad_bf16 || !grad16);
  }

  // The tensors over buffers at these addresses (device or host).
  std::vector<float> wds(sizes.size());
  std::vector<bool> in_tensor(total, false), in_param(total, false);
  auto make_tensors = [&](float* m, float* st0, float* st1, float* g32, uint16_t* g16,
                          uint16_t* par) {
    std::vector<FusedOptimizerTensor> tensors(sizes.size());
    for (size_t t = 0; t < sizes.size(); ++t) {
      const size_t off = layout.offset[t], goff = layout.grad_offset[t];
      wds[t] = t % 4 == 3 ? 0.0f : 0.05f * float(1 + t % 3);
      FusedOptimizerTensor& x = tensors[t];
      x.master = m + off;
      x.state0 = FusedNeedsState0(h) ? st0 + off : nullptr;
      x.state1 = FusedNeedsState1(h) ? st1 + off : nullptr;
      x.grad = grad16 ? static_cast<const void*>(g16 + goff) : static_cast<const void*>(g32 + goff);
      const bool with_param = t % 5 != 4;
      x.param_out = with_param ? par + off : nullptr;
      x.n = sizes[t];
      x.weight_decay = wds[t];
      for (size_t i = off; i < off + sizes[t]; ++i) {
        in_tensor[i] = true;
        in_param[i] = with_param;
      }
    }
    return tensors;
  };

  std::vector<float> out_master = master, out_s0 = s0, out_s1 = s1, out_g32 = grad32;
  std::vector<uint16_t> out_param = param, out_g16 = grad16v;
  if (runner == Runner::kCpuReference) {
    const std::vector<FusedOptimizerTensor> tensors =
        make_tensors(out_master.data(), out_s0.data(), out_s1.data(), out_g32.data(),
                     out_g16.data(), out_param.data());
    ASSERT_TRUE(FusedOptimizerStepReference(h, tensors.data(), tensors.size()));
  } else {
    DeviceVector<float> d_master(master), d_s0(s0), d_s1(s1), d_g32(grad32);
    DeviceVector<uint16_t> d_g16(grad16v), d_param(param);
    ASSERT_NE(d_master.get(), nullptr);
    const std::vector<FusedOptimizerTensor> tensors = make_tensors(
        d_master.get(), d_s0.get(), d_s1.get(), d_g32.get(), d_g16.get(), d_param.get());
    const size_t ws_bytes = FusedOptimizerWorkspaceBytes(tensors.size());
    if (tensors.size() > kFusedOptimizerInlineTensors) {
      EXPECT_GT(ws_bytes, 0u);
    } else {
      EXPECT_EQ(ws_bytes, 0u);
    }
    const DeviceVector<char> d_ws{std::vector<char>(ws_bytes)};
    ZS_CUDA_OK(LaunchFusedOptimizer(h, tensors.data(), tensors.size(),
                                    ws_bytes > 0 ? d_ws.get() : nullptr, ws_bytes, nullptr));
    ZS_CUDA_OK(cudaDeviceSynchronize());
    out_master = d_master.ToHost(), out_s0 = d_s0.ToHost(), out_s1 = d_s1.ToHost();
    out_g32 = d_g32.ToHost();
    out_param = d_param.ToHost(), out_g16 = d_g16.ToHost();
  }

  Failures fail;
  auto check = [&](const char* what, size_t t, size_t i, float got, const Approx& want,
                   double extra) {
    const double err = std::fabs(double(got) - want.v);
    if (!(err <= 2 * want.e + extra)) {  // also catches NaN
      std::ostringstream s;
      s << what << " tensor " << t << " (n=" << sizes[t] << ") element " << i << ": got " << got
        << " want " << want.v << " |diff| " << err << " > bound " << 2 * want.e + extra;
      fail.Add(s.str());
    }
  };
  for (size_t t = 0; t < sizes.size(); ++t) {
    const size_t off = layout.offset[t], goff = layout.grad_offset[t];
    for (size_t i = 0; i < sizes[t]; ++i) {
      const size_t k = off + i;
      const float g = grad16 ? LoadHalf(grad16v[goff + i], grad_bf16) : grad32[goff + i];
      const ElementRef r = Reference(h, wds[t], master[k], s0[k], s1[k], g);
      check("master", t, i, out_master[k], r.w, r.sign_ambiguous ? 2.0 * h.lr : 0.0);
      if (FusedNeedsState0(h)) check("state0", t, i, out_s0[k], r.s0, 0.0);
      if (FusedNeedsState1(h)) check("state1", t, i, out_s1[k], r.s1, 0.0);
      if (in_param[k] && out_param[k] != StoreHalf(out_master[k], param_bf16)) {
        fail.Add("param_out tensor " + std::to_string(t) + " element " + std::to_string(i) +
                 " is not the rounded new master");
      }
    }
  }
  // Everything else is untouched, bit for bit.
  for (size_t k = 0; k < total; ++k) {
    auto same = [](float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; };
    if (!in_tensor[k] && !same(out_master[k], master[k]))
      fail.Add("guard master " + std::to_string(k));
    if ((!in_tensor[k] || !FusedNeedsState0(h)) && !same(out_s0[k], s0[k])) {
      fail.Add("guard state0 " + std::to_string(k));
    }
    if ((!in_tensor[k] || !FusedNeedsState1(h)) && !same(out_s1[k], s1[k])) {
      fail.Add("guard state1 " + std::to_string(k));
    }
    if (!in_param[k] && out_param[k] != param[k]) fail.Add("guard param " + std::to_string(k));
  }
  if (out_g16 != grad16v || std::memcmp(out_g32.data(), grad32.data(), grad32.size() * 4) != 0) {
    fail.Add("the gradients were written to");
  }
  EXPECT_EQ(fail.count, 0) << c.name << ": " << fail.count << " failures, first ones:\n"
                           << fail.text.str();
}

// Sizes around the vector width, the block and the chunk (kFusedOptimizerChunk = 16384).
const std::vector<size_t> kSizes = {1, 3, 7, 8, 9, 31, 255, 1000, 4097, 16384 + 5, 40000, 70001};

class FusedOptimizerTest : public ::testing::TestWithParam<Case> {};

TEST_P(FusedOptimizerTest, MatchesFloat64ReferenceOnAnInlineList) {
  ZS_SKIP_WITHOUT_GPU();
  ASSERT_LE(kSizes.size(), kFusedOptimizerInlineTensors);
  RunAndCheck(GetParam(), kSizes, 1234, Runner::kGpu);
}

TEST_P(FusedOptimizerTest, MatchesFloat64ReferenceOnALongList) {
  ZS_SKIP_WITHOUT_GPU();
  // More tensors than fit in the kernel's arguments: the table goes through the workspace.
  std::vector<size_t> sizes;
  for (size_t i = 0; i < kFusedOptimizerInlineTensors + 13; ++i)
    sizes.push_back(1 + (i * 997) % 3001);
  RunAndCheck(GetParam(), sizes, 99, Runner::kGpu);
}

// The CPU reference under the same float64 checks: runs without a device.
TEST_P(FusedOptimizerTest, CpuReferenceMatchesFloat64Reference) {
  RunAndCheck(GetParam(), kSizes, 1234, Runner::kCpuReference);
}

// ---- the GPU against the CPU reference, bit for bit, for every state type ----------------

// Initial states of type `st` for `total` elements (second moments as roots in int8, >= 0),
// as bytes; int8 scales separately (one per block of each tensor, plus guards).
struct StateBuffers {
  std::vector<uint8_t> s0, s1;
  std::vector<float> scales0, scales1;
  std::vector<size_t> scale_offset;  // tensor t's first block scale
};

StateBuffers MakeStates(const Case& c, FusedStateType st, const Layout& layout,
                        const std::vector<size_t>& sizes, Uniform& rnd) {
  StateBuffers b;
  const size_t bytes = FusedStateElementBytes(st);
  b.s0.resize(layout.total * bytes);
  b.s1.resize(layout.total * bytes);
  const bool s0_positive = c.kind == FusedOptimizerKind::kAdagrad;
  for (size_t i = 0; i < layout.total; ++i) {
    const float v0 = s0_positive ? rnd.Next(1e-3f, 1.0f, true) : rnd.Next(1e-3f, 0.5f);
    const float v1 = rnd.Next(1e-6f, 1e-2f, true);
    if (st == FusedStateType::kF32) {
      std::memcpy(&b.s0[4 * i], &v0, 4);
      std::memcpy(&b.s1[4 * i], &v1, 4);
    } else if (st == FusedStateType::kBF16) {
      const uint16_t h0 = FloatToBF16Bits(v0), h1 = FloatToBF16Bits(v1);
      std::memcpy(&b.s0[2 * i], &h0, 2);
      std::memcpy(&b.s1[2 * i], &h1, 2);
    } else {
      const auto code = [&](bool positive) {
        return uint8_t(
            int8_t(positive ? int(rnd.Next(0.0f, 127.9f, true)) : int(rnd.Next(0.0f, 127.9f))));
      };
      b.s0[i] = code(s0_positive);
      b.s1[i] = code(true);  // AdamW/Adam's v as its root
    }
  }
  size_t cursor = 2;  // guards between the tensors' scales
  for (size_t n : sizes) {
    b.scale_offset.push_back(cursor);
    cursor += (n + kFusedQuantBlock - 1) / kFusedQuantBlock + 3;
  }
  b.scales0.resize(cursor);
  b.scales1.resize(cursor);
  for (size_t i = 0; i < cursor; ++i) {
    b.scales0[i] = rnd.Next(1e-3f, 4e-3f, true);
    b.scales1[i] = rnd.Next(1e-4f, 8e-4f, true);
  }
  return b;
}

void CompareGpuWithReference(const Case& c, FusedStateType st, const std::vector<size_t>& sizes,
                             uint32_t seed) {
  const char* state_name = st == FusedStateType::kF32    ? "f32"
                           : st == FusedStateType::kBF16 ? "bf16"
                                                         : "int8";
  SCOPED_TRACE(std::string(c.name) + " states " + state_name);
  FusedOptimizerHyper h = HyperFor(c);
  h.state_type = st;
  h.seed = 0xfeedull + seed;
  const Layout layout = MakeLayout(sizes);
  const size_t total = layout.total;
  Uniform rnd(seed);
  std::vector<float> master(total), grad32(total + 1);
  std::vector<uint16_t> grad16v(total + 1), param(total, 0x7777);
  for (size_t i = 0; i < total; ++i) master[i] = rnd.Next(0.05f, 2.0f);
  for (size_t i = 0; i < total + 1; ++i) {
    grad32[i] = rnd.Next(1e-3f, 2.0f);
    grad16v[i] =
        c.grad_type == FusedGradType::kF16 ? FloatToF16Bits(grad32[i]) : FloatToBF16Bits(grad32[i]);
  }
  StateBuffers init = MakeStates(c, st, layout, sizes, rnd);
  const size_t state_bytes = FusedStateElementBytes(st);
  // Edge cases in tensor 7's first three blocks (of 256): block 0 all zero (gradients and
  // states: an int8 block of scale 0), block 1 zero gradients and tiny states (int8 scales of
  // 1e-39, a subnormal: the division path), block 2 one NaN gradient (a NaN block).
  if (sizes.size() > 7 && sizes[7] >= 3 * kFusedQuantBlock) {
    const size_t off = layout.offset[7], goff = layout.grad_offset[7];
    for (size_t i = 0; i < 2 * kFusedQuantBlock; ++i) {
      grad32[goff + i] = 0.0f;
      grad16v[goff + i] = 0;
      const float v = i < kFusedQuantBlock ? 0.0f : 3e-39f;
      for (std::vector<uint8_t>* state : {&init.s0, &init.s1}) {
        uint8_t* p = state->data() + (off + i) * state_bytes;
        if (st == FusedStateType::kF32) {
          std::memcpy(p, &v, 4);
        } else if (st == FusedStateType::kBF16) {
          const uint16_t h16 = FloatToBF16Bits(v);
          std::memcpy(p, &h16, 2);
        } else {
          *p = i < kFusedQuantBlock ? 0 : 77;
        }
      }
    }
    init.scales0[init.scale_offset[7] + 1] = init.scales1[init.scale_offset[7] + 1] = 1e-39f;
    grad32[goff + 2 * kFusedQuantBlock + 5] = std::numeric_limits<float>::quiet_NaN();
    grad16v[goff + 2 * kFusedQuantBlock + 5] = 0x7fc0;  // NaN in bf16 and in f16
  }

  // One list over buffers at these addresses. Tensor 1 puts a 2^32 boundary of shard indices
  // inside itself (bf16 rounding keys change there).
  auto make_tensors = [&](float* m, uint8_t* st0, uint8_t* st1, float* sc0, float* sc1, float* g32,
                          uint16_t* g16, uint16_t* par) {
    std::vector<FusedOptimizerTensor> tensors(sizes.size());
    for (size_t t = 0; t < sizes.size(); ++t) {
      const size_t off = layout.offset[t], goff = layout.grad_offset[t];
      FusedOptimizerTensor& x = tensors[t];
      x.master = m + off;
      x.state0 = FusedNeedsState0(h) ? st0 + off * state_bytes : nullptr;
      x.state1 = FusedNeedsState1(h) ? st1 + off * state_bytes : nullptr;
      x.state0_scales = sc0 + init.scale_offset[t];
      x.state1_scales = sc1 + init.scale_offset[t];
      x.grad = c.grad_type == FusedGradType::kF32 ? static_cast<const void*>(g32 + goff)
                                                  : static_cast<const void*>(g16 + goff);
      x.param_out = t % 5 != 4 ? par + off : nullptr;
      x.n = sizes[t];
      x.weight_decay = t % 4 == 3 ? 0.0f : 0.05f * float(1 + t % 3);
      x.index_base = t == 1 ? (uint64_t{1} << 32) - sizes[t] / 2 : uint64_t(off) * 977;
    }
    return tensors;
  };

  // The CPU reference on host copies.
  std::vector<float> ref_master = master, ref_sc0 = init.scales0, ref_sc1 = init.scales1;
  std::vector<uint8_t> ref_s0 = init.s0, ref_s1 = init.s1;
  std::vector<uint16_t> ref_param = param;
  std::vector<float> g32_host = grad32;
  std::vector<uint16_t> g16_host = grad16v;
  {
    const std::vector<FusedOptimizerTensor> tensors =
        make_tensors(ref_master.data(), ref_s0.data(), ref_s1.data(), ref_sc0.data(),
                     ref_sc1.data(), g32_host.data(), g16_host.data(), ref_param.data());
    ASSERT_TRUE(FusedOptimizerStepReference(h, tensors.data(), tensors.size()));
  }
  EXPECT_NE(std::memcmp(ref_master.data(), master.data(), master.size() * 4), 0);
  if (!NoCudaDeviceReason().empty()) return;  // the caller skips, with the reason

  // The GPU.
  DeviceVector<float> d_master(master), d_sc0(init.scales0), d_sc1(init.scales1), d_g32(grad32);
  DeviceVector<uint8_t> d_s0(init.s0), d_s1(init.s1);
  DeviceVector<uint16_t> d_g16(grad16v), d_param(param);
  ASSERT_NE(d_master.get(), nullptr);
  const std::vector<FusedOptimizerTensor> tensors =
      make_tensors(d_master.get(), d_s0.get(), d_s1.get(), d_sc0.get(), d_sc1.get(), d_g32.get(),
                   d_g16.get(), d_param.get());
  const size_t ws_bytes = FusedOptimizerWorkspaceBytes(tensors.size());
  const DeviceVector<char> d_ws{std::vector<char>(ws_bytes)};
  ZS_CUDA_OK(LaunchFusedOptimizer(h, tensors.data(), tensors.size(),
                                  ws_bytes > 0 ? d_ws.get() : nullptr, ws_bytes, nullptr));
  ZS_CUDA_OK(cudaDeviceSynchronize());

  // Equal bits, except that NaN matches NaN: the GPU's arithmetic returns one canonical NaN
  // where x86 propagates an operand's payload and sign. `nan` says which values are NaN in
  // each array's format.
  auto same = [](const char* what, const auto& got, const auto& want, auto nan) {
    ASSERT_EQ(got.size(), want.size()) << what;
    const size_t elem = sizeof(got[0]);
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::memcmp(&got[i], &want[i], elem) != 0 && !(nan(got[i]) && nan(want[i]))) {
        ADD_FAILURE() << what << ": first difference at element " << i;
        return;
      }
    }
  };
  const auto f32_nan = [](float x) { return std::isnan(x); };
  const auto f16_nan = [](uint16_t h) { return (h & 0x7fffu) > 0x7c00u; };
  const auto bf16_nan = [](uint16_t h) { return (h & 0x7fffu) > 0x7f80u; };
  const auto no_nan = [](auto) { return false; };
  // States as bytes: compare them as their elements.
  auto as = [](const std::vector<uint8_t>& bytes, auto zero) {
    std::vector<decltype(zero)> v(bytes.size() / sizeof(zero));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(zero));
    return v;
  };
  same("master", d_master.ToHost(), ref_master, f32_nan);
  if (c.param_type == FusedParamType::kBF16) {
    same("param_out", d_param.ToHost(), ref_param, bf16_nan);
  } else {
    same("param_out", d_param.ToHost(), ref_param, f16_nan);
  }
  for (int k = 0; k < 2; ++k) {
    const std::vector<uint8_t> got = k == 0 ? d_s0.ToHost() : d_s1.ToHost();
    const std::vector<uint8_t>& want = k == 0 ? ref_s0 : ref_s1;
    const char* name = k == 0 ? "state0" : "state1";
    if (st == FusedStateType::kF32) {
      same(name, as(got, 0.0f), as(want, 0.0f), f32_nan);
    } else if (st == FusedStateType::kBF16) {
      same(name, as(got, uint16_t{0}), as(want, uint16_t{0}), bf16_nan);
    } else {
      same(name, got, want, no_nan);
    }
  }
  same("state0 scales", d_sc0.ToHost(), ref_sc0, f32_nan);
  same("state1 scales", d_sc1.ToHost(), ref_sc1, f32_nan);
  same("grad (read only)", d_g32.ToHost(), grad32, no_nan);
  same("grad16 (read only)", d_g16.ToHost(), grad16v, no_nan);
}

// Without a device only the reference's half runs (so its setup is exercised), then it skips.
TEST_P(FusedOptimizerTest, GpuMatchesCpuReferenceBitForBitForEveryStateType) {
  for (FusedStateType st : {FusedStateType::kF32, FusedStateType::kBF16, FusedStateType::kInt8}) {
    CompareGpuWithReference(GetParam(), st, kSizes, 7);
    // A long list: the table goes through the workspace.
    std::vector<size_t> sizes;
    for (size_t i = 0; i < kFusedOptimizerInlineTensors + 5; ++i)
      sizes.push_back(1 + (i * 1531) % 2900);
    CompareGpuWithReference(GetParam(), st, sizes, 8);
  }
  ZS_SKIP_WITHOUT_GPU();
}

// One tensor of more chunks than any GPU keeps resident at once (2048 x 16384 elements), so
// blocks go round the grid-stride loop. AdamW only: the loop does not depend on the kind.
TEST(FusedOptimizerGridStrideTest, GpuMatchesCpuReferenceOnMoreChunksThanOneWave) {
  ZS_SKIP_WITHOUT_GPU();
  const Case c{"AdamW_bf16_many_chunks", FusedOptimizerKind::kAdamW, 0.9f, 0.999f, false, 3,
               FusedGradType::kBF16,     FusedParamType::kBF16};
  for (FusedStateType st : {FusedStateType::kF32, FusedStateType::kBF16, FusedStateType::kInt8}) {
    CompareGpuWithReference(c, st, {2048 * kFusedOptimizerChunk + 77}, 11);
  }
}

constexpr auto kF32 = FusedGradType::kF32;
constexpr auto kBF16 = FusedGradType::kBF16;
constexpr auto kF16 = FusedGradType::kF16;
constexpr auto kOutBF16 = FusedParamType::kBF16;
constexpr auto kOutF16 = FusedParamType::kF16;
using K = FusedOptimizerKind;

INSTANTIATE_TEST_SUITE_P(
    AllKinds, FusedOptimizerTest,
    ::testing::Values(Case{"AdamW_f32", K::kAdamW, 0.9f, 0.999f, false, 5, kF32, kOutBF16},
                      Case{"AdamW_bf16", K::kAdamW, 0.9f, 0.999f, false, 1, kBF16, kOutBF16},
                      Case{"AdamW_f16", K::kAdamW, 0.9f, 0.95f, false, 3, kF16, kOutF16},
                      Case{"Adam_f32", K::kAdam, 0.9f, 0.999f, false, 7, kF32, kOutBF16},
                      Case{"Adam_bf16", K::kAdam, 0.8f, 0.99f, false, 2, kBF16, kOutBF16},
                      Case{"Sgd_f32", K::kSgd, 0.0f, 0.0f, false, 4, kF32, kOutBF16},
                      Case{"SgdMomentum_bf16", K::kSgd, 0.9f, 0.0f, false, 4, kBF16, kOutBF16},
                      Case{"SgdMomentumFirst_f32", K::kSgd, 0.9f, 0.0f, false, 1, kF32, kOutF16},
                      Case{"SgdNesterov_f32", K::kSgd, 0.9f, 0.0f, true, 6, kF32, kOutBF16},
                      Case{"SgdNesterov_bf16", K::kSgd, 0.5f, 0.0f, true, 2, kBF16, kOutBF16},
                      Case{"Adagrad_f32", K::kAdagrad, 0.0f, 0.0f, false, 3, kF32, kOutBF16},
                      Case{"Adagrad_bf16", K::kAdagrad, 0.0f, 0.0f, false, 9, kBF16, kOutBF16},
                      Case{"Lion_f32", K::kLion, 0.9f, 0.99f, false, 4, kF32, kOutBF16},
                      Case{"Lion_bf16", K::kLion, 0.95f, 0.98f, false, 2, kBF16, kOutBF16},
                      Case{"Lion_f16", K::kLion, 0.9f, 0.99f, false, 2, kF16, kOutF16}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// The argument checks run before anything touches the device, so these run everywhere.
TEST(FusedOptimizerArgsTest, RejectsBadArgumentsWithoutLaunching) {
  float buf[8] = {};
  FusedOptimizerTensor t;
  t.master = buf;
  t.grad = buf;
  t.n = 8;
  FusedOptimizerHyper h;  // AdamW: needs both states
  EXPECT_EQ(LaunchFusedOptimizer(h, &t, 1, nullptr, 0, nullptr), cudaErrorInvalidValue);
  t.state0 = buf;
  EXPECT_EQ(LaunchFusedOptimizer(h, &t, 1, nullptr, 0, nullptr), cudaErrorInvalidValue);
  h.kind = FusedOptimizerKind::kSgd;
  h.beta1 = 0.9f;  // momentum: state0 needed, state1 not
  t.state0 = nullptr;
  EXPECT_EQ(LaunchFusedOptimizer(h, &t, 1, nullptr, 0, nullptr), cudaErrorInvalidValue);
  h.step = 0;
  t.state0 = buf;
  EXPECT_EQ(LaunchFusedOptimizer(h, &t, 1, nullptr, 0, nullptr), cudaErrorInvalidValue);
  h.step = 1;
  h.kind = FusedOptimizerKind(17);
  EXPECT_EQ(LaunchFusedOptimizer(h, &t, 1, nullptr, 0, nullptr), cudaErrorInvalidValue);
  h.kind = FusedOptimizerKind::kSgd;
  t.grad = nullptr;
  EXPECT_EQ(LaunchFusedOptimizer(h, &t, 1, nullptr, 0, nullptr), cudaErrorInvalidValue);
  t.grad = buf;
  // A long list needs the workspace.
  std::vector<FusedOptimizerTensor> many(kFusedOptimizerInlineTensors + 1, t);
  const size_t need = FusedOptimizerWorkspaceBytes(many.size());
  EXPECT_GT(need, 0u);
  EXPECT_EQ(LaunchFusedOptimizer(h, many.data(), many.size(), nullptr, need, nullptr),
            cudaErrorInvalidValue);
  alignas(16) static char small[16];
  EXPECT_EQ(LaunchFusedOptimizer(h, many.data(), many.size(), small, sizeof(small), nullptr),
            cudaErrorInvalidValue);
}

TEST(FusedOptimizerArgsTest, EmptyListsLaunchNothing) {
  FusedOptimizerHyper h;
  EXPECT_EQ(LaunchFusedOptimizer(h, nullptr, 0, nullptr, 0, nullptr), cudaSuccess);
  FusedOptimizerTensor empty;  // n == 0: null pointers are fine
  EXPECT_EQ(LaunchFusedOptimizer(h, &empty, 1, nullptr, 0, nullptr), cudaSuccess);
  EXPECT_EQ(FusedOptimizerWorkspaceBytes(kFusedOptimizerInlineTensors), 0u);
}

}  // namespace
}  // namespace zs::kernels
