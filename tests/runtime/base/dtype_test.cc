#include "runtime/base/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace zs {
namespace {

// Reference rounding in double: the representable value nearest to x, ties to the one whose
// last mantissa bit is zero. `values` lists every finite value of the format in order.
uint16_t NearestEven(double x, const std::vector<std::pair<double, uint16_t>>& values) {
  auto it = std::lower_bound(values.begin(), values.end(), x,
                             [](const auto& p, double v) { return p.first < v; });
  if (it == values.begin()) return it->second;
  if (it == values.end()) return std::prev(it)->second;
  auto lo = std::prev(it);
  double dlo = x - lo->first, dhi = it->first - x;
  if (dlo < dhi) return lo->second;
  if (dhi < dlo) return it->second;
  return (lo->second & 1) == 0 ? lo->second : it->second;
}

std::vector<std::pair<double, uint16_t>> PositiveValues(float (*decode)(uint16_t), int exp_bits,
                                                        int man_bits) {
  std::vector<std::pair<double, uint16_t>> v;
  const uint32_t max_finite = ((uint32_t{1} << exp_bits) - 1) << man_bits;  // first inf pattern
  for (uint32_t b = 0; b < max_finite; ++b) v.push_back({double(decode(uint16_t(b))), uint16_t(b)});
  return v;
}

float DecodeBF16(uint16_t b) { return BF16ToFloat(BFloat16{b}); }
float DecodeF16(uint16_t b) { return F16ToFloat(Float16{b}); }

TEST(DTypeTest, NamesRoundTrip) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    EXPECT_EQ(*ParseDType(DTypeName(t)), t);
  }
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  auto bad = ParseDType("f64");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("f64"), std::string::npos);
}

TEST(DTypeTest, F16DecodesKnownValues) {
  EXPECT_EQ(F16ToFloat(Float16{0x3c00}), 1.0f);
  EXPECT_EQ(F16ToFloat(Float16{0xc000}), -2.0f);
  EXPECT_EQ(F16ToFloat(Float16{0x7bff}), 65504.0f);
  EXPECT_EQ(F16ToFloat(Float16{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(F16ToFloat(Float16{0x7c00})));
  EXPECT_TRUE(std::isnan(F16ToFloat(Float16{0x7e00})));
}

TEST(DTypeTest, EveryPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = F16ToFloat(Float16{uint16_t(b)});
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToFloat(FloatToF16(f))));
    } else {
      EXPECT_EQ(FloatToF16(f).bits, b) << "f16 pattern " << b;
    }
    float g = BF16ToFloat(BFloat16{uint16_t(b)});
    if (std::isnan(g)) {
      EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(g))));
    } else {
      EXPECT_EQ(FloatToBF16(g).bits, b) << "bf16 pattern " << b;
    }
  }
}

TEST(DTypeTest, RoundingMatchesADoubleReferenceOnRandomFloats) {
  const auto f16 = PositiveValues(DecodeF16, 5, 10);
  const auto bf16 = PositiveValues(DecodeBF16, 8, 7);
  std::mt19937 rng(42);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    // Random positive finite floats over the whole exponent range, plus midpoints (ties).
    float x = std::bit_cast<float>(bits(rng) & 0x7fffffffu);
    if (!std::isfinite(x)) continue;
    if (i % 4 == 0) {  // an exact tie between two neighbouring f16 values
      size_t k = bits(rng) % (f16.size() - 1);
      x = float((f16[k].first + f16[k + 1].first) / 2);
    }
    // Past the midpoint between the largest finite value and the next power of two: infinity
    // (the midpoint itself is a tie that goes to the even pattern, which is infinity).
    const double bf16_overflow = bf16.back().first + (bf16.back().first - bf16[bf16.size() - 2].first) / 2;
    uint16_t want_bf16 = double(x) >= bf16_overflow ? 0x7f80 : NearestEven(x, bf16);
    EXPECT_EQ(FloatToBF16(x).bits, want_bf16) << "x=" << x;
    const double f16_overflow = 65520.0;  // halfway from 65504 to the next (65536)
    uint16_t want_f16 = double(x) >= f16_overflow ? 0x7c00 : NearestEven(x, f16);
    EXPECT_EQ(FloatToF16(x).bits, want_f16) << "x=" << x;
    EXPECT_EQ(FloatToF16(-x).bits, uint16_t(want_f16 | 0x8000)) << "x=" << -x;
  }
}

}  // namespace
}  // namespace zs
