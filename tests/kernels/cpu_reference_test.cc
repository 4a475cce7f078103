// The CPU references of kernels/ against runtime/base's conversions and against independent
// arithmetic (long double sums, exact integer sums). Runs everywhere, GPU or not.
#include "kernels/cpu_reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/float_bits.h"
#include "runtime/base/dtype.h"

namespace zs::kernels {
namespace {

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t u) { return std::bit_cast<float>(u); }

TEST(CpuReferenceTest, SixteenBitToF32MatchesRuntimeForEveryPattern) {
  std::vector<uint16_t> in(65536);
  for (uint32_t b = 0; b < 65536; ++b) in[b] = uint16_t(b);
  std::vector<float> bf(65536), hf(65536);
  CastBF16ToF32Reference(in.data(), bf.data(), in.size());
  CastF16ToF32Reference(in.data(), hf.data(), in.size());
  for (uint32_t b = 0; b < 65536; ++b) {
    ASSERT_EQ(Bits(bf[b]), Bits(BF16ToFloat(BFloat16{uint16_t(b)}))) << "bf16 0x" << std::hex << b;
    ASSERT_EQ(Bits(hf[b]), Bits(F16ToFloat(Float16{uint16_t(b)}))) << "f16 0x" << std::hex << b;
  }
}

// f32 inputs at and around every rounding boundary of both formats, special values and random
// bit patterns: the reference casts agree with runtime/base bit for bit.
TEST(CpuReferenceTest, F32ToSixteenBitMatchesRuntimeAtEveryRoundingBoundary) {
  std::vector<float> in;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint32_t mid = (b << 16) | 0x8000u;  // halfway between two bf16 values
    for (uint32_t u : {mid - 1, mid, mid + 1}) in.push_back(FromBits(u));
    const float a = F16ToFloat(Float16{uint16_t(b)});
    const float c = F16ToFloat(Float16{uint16_t(b + 1)});
    if (std::isfinite(a) && std::isfinite(c) && (b & 0x7fffu) != 0x7bffu) {
      const float half = float((double(a) + double(c)) / 2);  // exact: 12 significant bits
      in.push_back(half);
      in.push_back(std::nextafter(half, 0.f));
      in.push_back(std::nextafter(half, std::numeric_limits<float>::infinity()));
    }
  }
  for (float f :
       {0.f, -0.f, 65504.f, 65519.99f, 65520.f, 0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1p-149f,
        std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
        FromBits(0x7f800001u), FromBits(0xffc00001u)}) {
    in.push_back(f);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1'000'000; ++i) in.push_back(FromBits(rng()));

  std::vector<uint16_t> bf(in.size()), hf(in.size());
  CastF32ToBF16Reference(in.data(), bf.data(), in.size());
  CastF32ToF16Reference(in.data(), hf.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(bf[i], FloatToBF16(in[i]).bits) << "f32 0x" << std::hex << Bits(in[i]);
    ASSERT_EQ(hf[i], FloatToF16(in[i]).bits) << "f32 0x" << std::hex << Bits(in[i]);
  }
}

TEST(CpuReferenceTest, ScaleAndCheckMatchesRuntimeArithmetic) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-4.f, 4.f);
  const size_t n = 1001;
  std::vector<float> f32(n);
  std::vector<uint16_t> bf(n), hf(n);
  for (size_t i = 0; i < n; ++i) {
    f32[i] = dist(rng);
    bf[i] = FloatToBF16(f32[i]).bits;
    hf[i] = FloatToF16(f32[i]).bits;
  }
  const float scale = 1.f / 3.f;
  std::vector<float> f32_out(n);
  std::vector<uint16_t> bf_out(n), hf_out(n);
  EXPECT_FALSE(ScaleAndCheckF32Reference(f32.data(), f32_out.data(), n, scale));
  EXPECT_FALSE(ScaleAndCheckBF16Reference(bf.data(), bf_out.data(), n, scale));
  EXPECT_FALSE(ScaleAndCheckF16Reference(hf.data(), hf_out.data(), n, scale));
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(Bits(f32_out[i]), Bits(f32[i] * scale));
    ASSERT_EQ(bf_out[i], FloatToBF16(BF16ToFloat(BFloat16{bf[i]}) * scale).bits);
    ASSERT_EQ(hf_out[i], FloatToF16(F16ToFloat(Float16{hf[i]}) * scale).bits);
  }
  // In place gives the same bits.
  EXPECT_FALSE(ScaleAndCheckF16Reference(hf.data(), hf.data(), n, scale));
  EXPECT_EQ(hf, hf_out);
}

TEST(CpuReferenceTest, ScaleAndCheckReportsInfNanAndOverflow) {
  std::vector<float> x = {1.f, 2.f, std::numeric_limits<float>::infinity(), 4.f};
  std::vector<float> y(x.size());
  EXPECT_TRUE(ScaleAndCheckF32Reference(x.data(), y.data(), x.size(), 0.5f));
  EXPECT_EQ(y[3], 2.f);  // the other elements are still scaled
  x[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(ScaleAndCheckF32Reference(x.data(), y.data(), x.size(), 0.5f));
  x[2] = 3.f;
  EXPECT_FALSE(ScaleAndCheckF32Reference(x.data(), y.data(), x.size(), 0.5f));
  EXPECT_TRUE(ScaleAndCheckF32Reference(x.data(), y.data(), x.size(), 1e38f));  // f32 overflow
  // 40000 is finite in f16 but 40000 * 2 is not: the stored output overflows.
  std::vector<uint16_t> h = {FloatToF16(40000.f).bits, FloatToF16(1.f).bits};
  std::vector<uint16_t> h_out(h.size());
  EXPECT_FALSE(ScaleAndCheckF16Reference(h.data(), h_out.data(), h.size(), 1.f));
  EXPECT_TRUE(ScaleAndCheckF16Reference(h.data(), h_out.data(), h.size(), 2.f));
  // The largest finite bf16 times 1.5 is finite in f32 and rounds to inf in bf16.
  std::vector<uint16_t> b = {0x7f7fu};
  std::vector<uint16_t> b_out(1);
  EXPECT_TRUE(ScaleAndCheckBF16Reference(b.data(), b_out.data(), 1, 1.5f));
}

TEST(CpuReferenceTest, GradSquaredNormIsExactOnIntegers) {
  // Sums of squares of small integers are exact in double: the reference must hit them.
  for (size_t n : {size_t{1}, size_t{3}, size_t{257}, size_t{4099}}) {
    std::vector<float> x(n);
    double expected = 0;
    for (size_t i = 0; i < n; ++i) {
      x[i] = float(int(i % 97) - 48);
      if (x[i] == 0) x[i] = 5;
      expected += double(x[i]) * x[i];
    }
    EXPECT_EQ(GradSquaredNormF32Reference(x.data(), n), expected) << "n=" << n;
  }
  EXPECT_EQ(GradSquaredNormF32Reference(nullptr, 0), 0.0);
  const float zeros[3] = {0.f, -0.f, 0.f};
  EXPECT_EQ(GradSquaredNormF32Reference(zeros, 3), 0.0);
}

TEST(CpuReferenceTest, GradSquaredNormMatchesLongDoubleAndIgnoresOrder) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> mant(0.5f, 1.f);
  std::uniform_int_distribution<int> expo(-30, 30);
  const size_t n = 10007;
  std::vector<float> x(n);
  long double ref = 0;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::ldexp(mant(rng), expo(rng)) * ((rng() & 1) ? 1.f : -1.f);
    ref += (long double)x[i] * x[i];
  }
  const double got = GradSquaredNormF32Reference(x.data(), n);
  EXPECT_NEAR(got, double(ref), double(ref) * 1e-15);
  std::shuffle(x.begin(), x.end(), rng);
  EXPECT_EQ(Bits(float(got)), Bits(float(GradSquaredNormF32Reference(x.data(), n))));
  EXPECT_EQ(std::bit_cast<uint64_t>(got),
            std::bit_cast<uint64_t>(GradSquaredNormF32Reference(x.data(), n)));
}

TEST(CpuReferenceTest, GradSquaredNormSpansTheWholeF32Range) {
  // Huge and tiny magnitudes together: tiny squares vanish below the largest one's precision.
  const float big = std::numeric_limits<float>::max();
  std::vector<float> x = {big, 1e-30f, -big, 0x1p-149f};
  EXPECT_EQ(GradSquaredNormF32Reference(x.data(), x.size()), 2.0 * double(big) * double(big));
  std::vector<float> tiny = {0x1p-149f, -0x1p-149f, 0x1p-148f};
  EXPECT_EQ(GradSquaredNormF32Reference(tiny.data(), tiny.size()), 6 * std::ldexp(1.0, -298));
  // bf16 / f16 inputs: 1.5^2 * 3 = 6.75.
  std::vector<uint16_t> b(3, FloatToBF16(1.5f).bits), h(3, FloatToF16(-1.5f).bits);
  EXPECT_EQ(GradSquaredNormBF16Reference(b.data(), 3), 6.75);
  EXPECT_EQ(GradSquaredNormF16Reference(h.data(), 3), 6.75);
}

TEST(CpuReferenceTest, GradSquaredNormPropagatesNanAndInf) {
  std::vector<float> x = {1.f, std::numeric_limits<float>::infinity(), 2.f};
  EXPECT_EQ(GradSquaredNormF32Reference(x.data(), x.size()),
            std::numeric_limits<double>::infinity());
  x[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(GradSquaredNormF32Reference(x.data(), x.size())));
}

TEST(CpuReferenceTest, ExactSumRoundsTheLastBitToNearestEven) {
  // 2^53 + 1 is a tie between 2^53 and 2^53 + 2: even wins. 2^53 + 3 rounds up to 2^53 + 4.
  U128 s;
  s.lo = (uint64_t{1} << 53) + 1;
  EXPECT_EQ(U128ScaledToDouble(s, 0), 0x1p53);
  s.lo = (uint64_t{1} << 53) + 3;
  EXPECT_EQ(U128ScaledToDouble(s, 0), 0x1p53 + 4);
  // A value past 2^64: 2^100 + 2^47 + 1 is just above the tie at 2^47 (the ulp is 2^48).
  s.hi = uint64_t{1} << 36;
  s.lo = (uint64_t{1} << 47) + 1;
  EXPECT_EQ(U128ScaledToDouble(s, -100), 1.0 + 0x1p-52);
  s.lo = uint64_t{1} << 47;
  EXPECT_EQ(U128ScaledToDouble(s, -100), 1.0);
}

}  // namespace
}  // namespace zs::kernels
