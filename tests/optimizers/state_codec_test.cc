// Tests of optimizers/state_codec.h against plain scalar references, on every Highway target
// this build generated and this CPU supports.
#include "optimizers/state_codec.h"
#include "optimizers/stochastic_rounding.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

namespace zs {
namespace {

// Runs `body` once per generated and supported Highway target (so the SIMD kernels of each
// target, including the one-lane tails, are compared with the references), then restores the
// normal dispatch.
void ForEachTarget(const std::function<void()>& body) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
    body();
  }
  hwy::SetSupportedTargetsForTest(0);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

uint32_t Bits(float x) { return std::bit_cast<uint32_t>(x); }
float FromBF16(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }

// Scalar reference of the bf16 encoding: truncation after adding the random bits; non-finite
// values kept (NaN made quiet).
uint16_t RefEncodeBF16(float x, uint32_t r) {
  const uint32_t u = Bits(x);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  if (std::isinf(x)) return static_cast<uint16_t>(u >> 16);
  return static_cast<uint16_t>((u + r) >> 16);
}

std::vector<uint16_t> RefEncodeBF16Range(const std::vector<float>& x, int64_t offset, uint64_t seed,
                                         int64_t step, int state_index) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    out[i] = RefEncodeBF16(
        x[i], StochasticRoundingBits(seed, step, state_index, offset + static_cast<int64_t>(i)));
  }
  return out;
}

// Scalar reference of one int8 block.
void RefEncodeInt8Block(const float* x, size_t count, int8_t* codes, float* scale) {
  float max_abs = 0.0f;
  for (size_t i = 0; i < count; ++i) max_abs = std::max(max_abs, std::fabs(x[i]));
  *scale = max_abs / 127.0f;
  for (size_t i = 0; i < count; ++i) {
    if (*scale == 0.0f) {
      codes[i] = 0;
      continue;
    }
    // [Note: int8 quantization]: multiply by the block's reciprocal (x / scale only when the
    // reciprocal overflows). Default mode: nearest, ties to even.
    const float inv = 127.0f / max_abs;
    const float q = std::nearbyint(std::isfinite(inv) ? x[i] * inv : x[i] / *scale);
    codes[i] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
  }
}

size_t NumBlocks(size_t n) { return (n + kQuantBlock - 1) / kQuantBlock; }

// Values of mixed sign and magnitude, with a few exact bf16 values and zeros mixed in.
std::vector<float> RandomValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-30, 30);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::ldexp(mant(rng), exp(rng));
    if (i % 17 == 3) x[i] = FromBF16(static_cast<uint16_t>(Bits(x[i]) >> 16));
    if (i % 29 == 5) x[i] = 0.0f;
  }
  return x;
}

// ---- StochasticRoundingBits -------------------------------------------------------------------

TEST(StochasticRoundingBitsTest, SixteenBitsDeterministicAndKeyed) {
  constexpr int kN = 1 << 14;
  int same_seed = 0, same_step = 0, same_state = 0, same_neighbour = 0;
  double sum = 0.0;
  int bit_count[16] = {};
  for (int64_t i = 0; i < kN; ++i) {
    const uint32_t r = StochasticRoundingBits(7, 3, 1, i);
    ASSERT_LT(r, 1u << 16);
    ASSERT_EQ(r, StochasticRoundingBits(7, 3, 1, i));
    same_seed += r == StochasticRoundingBits(8, 3, 1, i);
    same_step += r == StochasticRoundingBits(7, 4, 1, i);
    same_state += r == StochasticRoundingBits(7, 3, 0, i);
    same_neighbour += r == StochasticRoundingBits(7, 3, 1, i + 1);
    sum += r;
    for (int b = 0; b < 16; ++b) bit_count[b] += (r >> b) & 1;
  }
  // Independent uniform 16-bit values agree with probability 2^-16: ~0.25 expected here.
  EXPECT_LE(same_seed, 4);
  EXPECT_LE(same_step, 4);
  EXPECT_LE(same_state, 4);
  EXPECT_LE(same_neighbour, 4);
  // Mean of U{0..65535} is 32767.5 with sd 18918 / sqrt(kN) = 148 for the average.
  EXPECT_NEAR(sum / kN, 32767.5, 5 * 148.0);
  for (int b = 0; b < 16; ++b) EXPECT_NEAR(bit_count[b], kN / 2, 5 * 64) << "bit " << b;
  // The two states of an element share one hash ([Note: stochastic rounding bits]): its halves
  // must be uncorrelated. Both states' bits of one element, centred: the sample correlation of
  // independent uniforms has sd 1 / sqrt(kN) = 0.0078.
  double cov = 0.0, var0 = 0.0, var1 = 0.0, sum0 = 0.0;
  for (int64_t i = 0; i < kN; ++i) {
    const double a = double(StochasticRoundingBits(7, 3, 0, i)) - 32767.5;
    const double b = double(StochasticRoundingBits(7, 3, 1, i)) - 32767.5;
    cov += a * b;
    var0 += a * a;
    var1 += b * b;
    sum0 += a;
  }
  EXPECT_NEAR(cov / std::sqrt(var0 * var1), 0.0, 5 * 0.0078);
  EXPECT_NEAR(sum0 / kN, 0.0, 5 * 148.0) << "state 0's bits are not centred";
  // The high 32 bits of the index take part (shards past 2^32 elements).
  int same_high = 0;
  for (int64_t i = 0; i < 1024; ++i) {
    same_high += StochasticRoundingBits(7, 3, 1, i) ==
                 StochasticRoundingBits(7, 3, 1, i + (int64_t{1} << 32));
  }
  EXPECT_LE(same_high, 3);
}

// [Note: hashing within a 64K block]: the fused kernel's split form gives fmix32's bits for
// every lane of a step of any power-of-two width, at the first and last steps of a block and at
// random ones, under random keys.
TEST(StochasticRoundingBitsTest, SplitBlockHashEqualsTheWholeHash) {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 64; ++trial) {
    const sr::SrKey key = sr::MakeSrKey(rng(), int64_t(rng() % 1000), uint32_t(rng()));
    const uint32_t hi = uint32_t(rng()) >> 16;
    const uint32_t block_key = sr::SrBlockKey(key, hi);
    for (uint32_t width = 1; width <= 256; width *= 2) {
      for (uint32_t lo : {0u, 0x10000u - width, uint32_t(rng()) & 0xffffu & ~(width - 1)}) {
        const uint32_t base = (hi << 16) | lo;
        for (uint32_t lane = 0; lane < width; ++lane) {
          ASSERT_EQ(sr::SrHashSplit(block_key, key, base, lane, width),
                    sr::SrHash(key, base + lane))
              << "base " << base << " lane " << lane << " width " << width;
        }
      }
    }
  }
}

// ---- bf16 -------------------------------------------------------------------------------------

TEST(StateCodecBF16Test, MatchesScalarReferenceOnEveryTarget) {
  const std::vector<size_t> sizes = {1, 3, 7, 8, 15, 16, 17, 31, 64, 255, 1000, 4097};
  ForEachTarget([&] {
    for (size_t n : sizes) {
      for (int64_t offset : {int64_t{0}, int64_t{5}, int64_t{123457}, (int64_t{1} << 32) - 9,
                             (int64_t{3} << 32) + 1}) {
        const std::vector<float> x = RandomValues(n, static_cast<uint32_t>(n * 31 + offset));
        std::vector<uint16_t> codes(n, 0xdead);
        EncodeState(StateDType::kBF16, x.data(), offset, static_cast<int64_t>(n), codes.data(),
                    nullptr, 42, 17, 1);
        ASSERT_EQ(codes, RefEncodeBF16Range(x, offset, 42, 17, 1))
            << "n " << n << " offset " << offset;
        std::vector<float> decoded(n, -1.0f);
        DecodeState(StateDType::kBF16, codes.data(), nullptr, offset, static_cast<int64_t>(n),
                    decoded.data());
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(decoded[i]), Bits(FromBF16(codes[i])));
      }
    }
  });
}

TEST(StateCodecBF16Test, ResultIsOneOfTheTwoNeighbours) {
  const std::vector<float> x = RandomValues(3000, 9);
  for (int64_t step = 1; step <= 4; ++step) {
    std::vector<uint16_t> codes(x.size());
    EncodeState(StateDType::kBF16, x.data(), 0, static_cast<int64_t>(x.size()), codes.data(),
                nullptr, 1, step, 0);
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t down = static_cast<uint16_t>(Bits(x[i]) >> 16);  // toward zero
      ASSERT_TRUE(codes[i] == down || codes[i] == down + 1) << x[i];
      const float lo = FromBF16(down), hi = FromBF16(static_cast<uint16_t>(down + 1));
      ASSERT_LE(std::fabs(lo), std::fabs(x[i]));
      ASSERT_GE(std::fabs(hi), std::fabs(x[i]));
    }
  }
}

TEST(StateCodecBF16Test, UnbiasedOverSteps) {
  // 64 values at various fractional positions between two bf16 neighbours.
  constexpr int kValues = 64;
  constexpr int kSteps = 2000;
  std::vector<float> x(kValues);
  for (int i = 0; i < kValues; ++i) {
    const float base = std::ldexp(1.0f + static_cast<float>(i) / 128.0f, i % 11 - 5);
    const uint32_t frac = static_cast<uint32_t>((i * 40503u + 777u) % 65536u);
    x[i] = std::bit_cast<float>((Bits(base) & 0xffff0000u) | frac) * (i % 3 == 0 ? -1.0f : 1.0f);
  }
  std::vector<double> sum(kValues, 0.0);
  std::vector<uint16_t> codes(kValues);
  std::vector<float> decoded(kValues);
  for (int step = 1; step <= kSteps; ++step) {
    EncodeState(StateDType::kBF16, x.data(), 1000, kValues, codes.data(), nullptr, 5, step, 1);
    DecodeState(StateDType::kBF16, codes.data(), nullptr, 1000, kValues, decoded.data());
    for (int i = 0; i < kValues; ++i) sum[i] += decoded[i];
  }
  for (int i = 0; i < kValues; ++i) {
    const uint16_t down = static_cast<uint16_t>(Bits(x[i]) >> 16);
    const double lo = FromBF16(down), hi = FromBF16(static_cast<uint16_t>(down + 1));
    const double p = (x[i] - lo) / (hi - lo);
    const double se = std::fabs(hi - lo) * std::sqrt(p * (1.0 - p) / kSteps);
    EXPECT_NEAR(sum[i] / kSteps, x[i], 5.0 * se + 1e-3 * std::fabs(hi - lo))
        << "value " << i << " p " << p;
  }
}

TEST(StateCodecBF16Test, SplitIndependentAndDeterministic) {
  constexpr int64_t kN = 5000;
  constexpr int64_t kOffset = 777;
  const std::vector<float> x = RandomValues(kN, 3);
  std::vector<uint16_t> whole(kN), again(kN);
  EncodeState(StateDType::kBF16, x.data(), kOffset, kN, whole.data(), nullptr, 11, 9, 1);
  EncodeState(StateDType::kBF16, x.data(), kOffset, kN, again.data(), nullptr, 11, 9, 1);
  EXPECT_EQ(whole, again);
  std::mt19937 rng(1);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<uint16_t> pieces(kN, 0);
    for (int64_t begin = 0; begin < kN;) {
      const int64_t len =
          std::min<int64_t>(kN - begin, std::uniform_int_distribution<int64_t>(1, 300)(rng));
      EncodeState(StateDType::kBF16, x.data() + begin, kOffset + begin, len, pieces.data() + begin,
                  nullptr, 11, 9, 1);
      begin += len;
    }
    ASSERT_EQ(pieces, whole) << "trial " << trial;
  }
  // Another step, seed or state index draws other bits (and so, for most inexact values, some
  // other codes).
  for (auto [seed, step, state] : {std::tuple{12ull, 9, 1}, {11ull, 10, 1}, {11ull, 9, 0}}) {
    std::vector<uint16_t> other(kN);
    EncodeState(StateDType::kBF16, x.data(), kOffset, kN, other.data(), nullptr, seed, step, state);
    EXPECT_NE(other, whole);
  }
}

TEST(StateCodecBF16Test, ExactValuesStayExact) {
  std::vector<float> x;
  for (uint32_t hi = 0; hi < 0x10000u; hi += 7) {
    const float v = FromBF16(static_cast<uint16_t>(hi));
    if (!std::isnan(v)) x.push_back(v);
  }
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(-0.0f);
  std::vector<uint16_t> codes(x.size());
  std::vector<float> decoded(x.size());
  ForEachTarget([&] {
    for (int64_t step = 1; step <= 3; ++step) {
      EncodeState(StateDType::kBF16, x.data(), 0, static_cast<int64_t>(x.size()), codes.data(),
                  nullptr, 99, step, 1);
      DecodeState(StateDType::kBF16, codes.data(), nullptr, 0, static_cast<int64_t>(x.size()),
                  decoded.data());
      for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(Bits(decoded[i]), Bits(x[i])) << x[i];
    }
  });
}

TEST(StateCodecBF16Test, NonFiniteKept) {
  const float inf = std::numeric_limits<float>::infinity();
  const float big = std::numeric_limits<float>::max();
  std::vector<float> x = {
      std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
      std::bit_cast<float>(0x7f800001u),  // signalling, payload in low bits
      std::bit_cast<float>(0xff80ffffu), std::bit_cast<float>(0x7fc00000u),
      // All-ones payloads: adding the random bits would carry out of the
      // upper half (0xffff + 1 wraps to +0, 0x7fff + 1 to -0).
      std::bit_cast<float>(0xffffffffu), std::bit_cast<float>(0x7fffffffu), inf, -inf, big, -big};
  // Repeat so that the vector path (not only the tail) sees them.
  const size_t distinct = x.size();
  while (x.size() < 64) x.push_back(x[x.size() % distinct]);
  std::vector<uint16_t> codes(x.size());
  std::vector<float> decoded(x.size());
  ForEachTarget([&] {
    for (int64_t step = 1; step <= 50; ++step) {
      EncodeState(StateDType::kBF16, x.data(), 0, static_cast<int64_t>(x.size()), codes.data(),
                  nullptr, 3, step, 1);
      DecodeState(StateDType::kBF16, codes.data(), nullptr, 0, static_cast<int64_t>(x.size()),
                  decoded.data());
      for (size_t i = 0; i < x.size(); ++i) {
        if (std::isnan(x[i])) {
          ASSERT_TRUE(std::isnan(decoded[i])) << i;
          ASSERT_EQ(std::signbit(decoded[i]), std::signbit(x[i])) << i;
        } else if (std::isinf(x[i])) {
          ASSERT_EQ(decoded[i], x[i]) << i;
        } else {
          // FLT_MAX lies between the largest finite bf16 and inf: either is a valid SR result.
          ASSERT_TRUE(std::fabs(decoded[i]) == inf || std::fabs(decoded[i]) <= big) << i;
          ASSERT_FALSE(std::isnan(decoded[i])) << i;
          ASSERT_EQ(std::signbit(decoded[i]), std::signbit(x[i])) << i;
        }
      }
    }
  });
}

// ---- int8 -------------------------------------------------------------------------------------

// Values whose magnitude varies from block to block, with an all-zero block when there are
// enough blocks.
std::vector<float> BlockValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t block = i / kQuantBlock;
    x[i] = block == 2 ? 0.0f : std::ldexp(u(rng), static_cast<int>(block % 7) * 3 - 9);
  }
  return x;
}

TEST(StateCodecInt8Test, MatchesReferenceAndRoundTripsOnEveryTarget) {
  const std::vector<size_t> sizes = {1, 2, 7, 9, 255, 256, 257, 1000, 4097};
  ForEachTarget([&] {
    for (size_t n : sizes) {
      SCOPED_TRACE(n);
      const std::vector<float> x = BlockValues(n, static_cast<uint32_t>(n));
      std::vector<int8_t> codes(n, 99);
      std::vector<float> scales(NumBlocks(n), -1.0f);
      EncodeState(StateDType::kInt8, x.data(), 0, static_cast<int64_t>(n), codes.data(),
                  scales.data(), 0, 1, 0);
      std::vector<int8_t> ref_codes(n);
      std::vector<float> ref_scales(NumBlocks(n));
      for (size_t b = 0; b < NumBlocks(n); ++b) {
        const size_t begin = b * kQuantBlock;
        RefEncodeInt8Block(x.data() + begin, std::min<size_t>(kQuantBlock, n - begin),
                           ref_codes.data() + begin, &ref_scales[b]);
      }
      ASSERT_EQ(codes, ref_codes);
      for (size_t b = 0; b < scales.size(); ++b) ASSERT_EQ(Bits(scales[b]), Bits(ref_scales[b]));

      std::vector<float> decoded(n, -1.0f);
      DecodeState(StateDType::kInt8, codes.data(), scales.data(), 0, static_cast<int64_t>(n),
                  decoded.data());
      for (size_t b = 0; b < scales.size(); ++b) {
        const size_t begin = b * kQuantBlock;
        const size_t end = std::min<size_t>(begin + kQuantBlock, n);
        const float scale = scales[b];
        float max_abs = 0.0f;
        size_t arg_max = begin;
        for (size_t i = begin; i < end; ++i) {
          if (std::fabs(x[i]) > max_abs) max_abs = std::fabs(x[i]), arg_max = i;
        }
        for (size_t i = begin; i < end; ++i) {
          ASSERT_EQ(Bits(decoded[i]), Bits(static_cast<float>(codes[i]) * scale)) << i;
          // Half a step of quantization plus float rounding of x / scale and code * scale.
          ASSERT_LE(std::fabs(decoded[i] - x[i]), 0.5f * scale + 4e-7f * max_abs) << i;
        }
        if (max_abs == 0.0f) {
          ASSERT_EQ(scale, 0.0f);
          for (size_t i = begin; i < end; ++i) ASSERT_EQ(decoded[i], 0.0f);
        } else {
          ASSERT_EQ(std::abs(codes[arg_max]), 127);
          ASSERT_NEAR(decoded[arg_max], x[arg_max],
                      4 * std::numeric_limits<float>::epsilon() * max_abs);
        }
      }
    }
  });
}

TEST(StateCodecInt8Test, NearTiesFollowTheBlockReciprocal) {
  // Values within an ulp of code + 0.5 steps, where x * (127 / max) and x / scale can round to
  // different codes: the encoding must follow the reciprocal (the reference, [Note: int8
  // quantization]) on every target, and the set must contain inputs where the two differ (or
  // the test would not tell them apart).
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> mag(0.5f, 2.0f);
  std::vector<float> x;
  for (int block = 0; block < 64; ++block) {
    const float max_abs = std::ldexp(mag(rng), block % 13 - 6);
    const float scale = max_abs / 127.0f;
    x.push_back(block % 2 ? max_abs : -max_abs);
    for (int k = 1; x.size() % kQuantBlock != 0; ++k) {
      const float tie = (static_cast<float>(k % 127) + 0.5f) * scale * (k % 2 ? 1.0f : -1.0f);
      const int ulps = k % 3 - 1;
      x.push_back(ulps == 0 ? tie : std::nextafter(tie, ulps * max_abs * 2));
    }
  }
  const size_t n = x.size();
  std::vector<int8_t> ref_codes(n);
  std::vector<float> ref_scales(NumBlocks(n));
  for (size_t b = 0; b < NumBlocks(n); ++b) {
    RefEncodeInt8Block(x.data() + b * kQuantBlock, kQuantBlock, ref_codes.data() + b * kQuantBlock,
                       &ref_scales[b]);
  }
  size_t differ = 0;
  for (size_t i = 0; i < n; ++i) {
    const float scale = ref_scales[i / kQuantBlock];
    differ += std::nearbyint(x[i] / scale) != static_cast<float>(ref_codes[i]) &&
              std::fabs(x[i] / scale) < 127.0f;
  }
  EXPECT_GT(differ, 0u) << "no input where the reciprocal and the division disagree";
  ForEachTarget([&] {
    std::vector<int8_t> codes(n);
    std::vector<float> scales(NumBlocks(n));
    EncodeState(StateDType::kInt8, x.data(), 0, static_cast<int64_t>(n), codes.data(),
                scales.data(), 0, 1, 0);
    ASSERT_EQ(codes, ref_codes);
  });
}

TEST(StateCodecInt8Test, TinyBlocksWhoseReciprocalOverflowsStillEncode) {
  // max |x| = 1e-38: scale = max / 127 is a (subnormal) non-zero float but 127 / max overflows,
  // so the encoding divides; codes must still reach +-127 and decode near x.
  std::vector<float> x(kQuantBlock);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1e-38f * (float(i % 11) - 5.0f) / 5.0f;
  std::vector<int8_t> codes(x.size()), ref_codes(x.size());
  float scale = 0.0f, ref_scale = 0.0f;
  EncodeState(StateDType::kInt8, x.data(), 0, int64_t(x.size()), codes.data(), &scale, 0, 1, 0);
  RefEncodeInt8Block(x.data(), x.size(), ref_codes.data(), &ref_scale);
  ASSERT_FALSE(std::isfinite(127.0f / 1e-38f));
  EXPECT_GT(scale, 0.0f);
  EXPECT_EQ(codes, ref_codes);
  EXPECT_EQ(*std::max_element(codes.begin(), codes.end()), 127);
  EXPECT_EQ(*std::min_element(codes.begin(), codes.end()), -127);
}

TEST(StateCodecInt8Test, TiesRoundToEvenAndClamp) {
  // max 127 gives scale 1 exactly: x / scale = x, so the ties are exact.
  std::vector<float> x = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, -127.0f, 3.49f};
  std::vector<int8_t> codes(x.size());
  float scale = 0.0f;
  EncodeState(StateDType::kInt8, x.data(), 0, static_cast<int64_t>(x.size()), codes.data(), &scale,
              0, 1, 0);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(codes, (std::vector<int8_t>{127, 0, 2, 2, 0, -2, -2, 126, -127, 3}));
}

// A block holding inf or NaN gets a non-finite scale; its codes are of no use, but each must
// depend only on its value, not on where it sits (vector groups, single vectors or the
// one-lane tail), and stay in [-127, 127].
TEST(StateCodecInt8Test, NonFiniteBlocksGiveCodesIndependentOfPosition) {
  ForEachTarget([] {
    for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
      SCOPED_TRACE(bad);
      const size_t n = 201;  // whole groups of four vectors, single vectors and a tail
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = 0.01f * (float(i % 23) - 11.0f);
      x[37] = bad;
      std::vector<int8_t> base(n);
      float base_scale = 0.0f;
      EncodeState(StateDType::kInt8, x.data(), 0, int64_t(n), base.data(), &base_scale, 0, 1, 0);
      EXPECT_FALSE(std::isfinite(base_scale));
      for (size_t shift : {1u, 5u, 8u, 33u, 170u}) {
        std::vector<float> y(n);
        for (size_t i = 0; i < n; ++i) y[(i + shift) % n] = x[i];
        std::vector<int8_t> codes(n);
        float scale = 0.0f;
        EncodeState(StateDType::kInt8, y.data(), 0, int64_t(n), codes.data(), &scale, 0, 1, 0);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(codes[(i + shift) % n], base[i]) << "value " << x[i] << " moved by " << shift;
          ASSERT_GE(codes[i], -127);
        }
      }
    }
  });
}

TEST(StateCodecInt8Test, AllZeroBlocks) {
  std::vector<float> x(600, 0.0f);
  x[17] = -0.0f;
  std::vector<int8_t> codes(x.size(), 5);
  std::vector<float> scales(NumBlocks(x.size()), -1.0f);
  EncodeState(StateDType::kInt8, x.data(), 0, 600, codes.data(), scales.data(), 0, 1, 0);
  for (float s : scales) EXPECT_EQ(s, 0.0f);
  for (int8_t c : codes) ASSERT_EQ(c, 0);
  std::vector<float> decoded(x.size(), 1.0f);
  DecodeState(StateDType::kInt8, codes.data(), scales.data(), 0, 600, decoded.data());
  for (float d : decoded) ASSERT_EQ(d, 0.0f);
}

TEST(StateCodecInt8Test, SplitByBlocksIsIdentical) {
  constexpr size_t kN = 10 * kQuantBlock + 77;  // partial last block
  const std::vector<float> x = BlockValues(kN, 5);
  std::vector<int8_t> whole(kN);
  std::vector<float> whole_scales(NumBlocks(kN));
  EncodeState(StateDType::kInt8, x.data(), 0, kN, whole.data(), whole_scales.data(), 0, 1, 0);
  std::mt19937 rng(2);
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<int8_t> pieces(kN, 0);
    std::vector<float> piece_scales(NumBlocks(kN), -1.0f);
    for (size_t block = 0; block < NumBlocks(kN);) {
      const size_t blocks =
          std::min(NumBlocks(kN) - block, std::uniform_int_distribution<size_t>(1, 4)(rng));
      const size_t begin = block * kQuantBlock;
      const size_t len = std::min(kN, (block + blocks) * kQuantBlock) - begin;
      EncodeState(StateDType::kInt8, x.data() + begin, static_cast<int64_t>(begin),
                  static_cast<int64_t>(len), pieces.data() + begin, piece_scales.data() + block, 0,
                  1, 0);
      block += blocks;
    }
    ASSERT_EQ(pieces, whole);
    for (size_t b = 0; b < whole_scales.size(); ++b) {
      ASSERT_EQ(Bits(piece_scales[b]), Bits(whole_scales[b]));
    }
  }
}

TEST(StateCodecInt8Test, DecodeOfAPieceMatchesDecodeOfTheWhole) {
  constexpr size_t kN = 5 * kQuantBlock + 3;
  const std::vector<float> x = BlockValues(kN, 8);
  std::vector<int8_t> codes(kN);
  std::vector<float> scales(NumBlocks(kN));
  EncodeState(StateDType::kInt8, x.data(), 0, kN, codes.data(), scales.data(), 0, 1, 0);
  std::vector<float> whole(kN);
  DecodeState(StateDType::kInt8, codes.data(), scales.data(), 0, kN, whole.data());
  const size_t begin = 2 * kQuantBlock;
  std::vector<float> piece(kN - begin);
  DecodeState(StateDType::kInt8, codes.data() + begin, scales.data() + 2,
              static_cast<int64_t>(begin), static_cast<int64_t>(piece.size()), piece.data());
  for (size_t i = 0; i < piece.size(); ++i) ASSERT_EQ(Bits(piece[i]), Bits(whole[begin + i]));
}

TEST(StateCodecInt8DeathTest, UnalignedOffsetIsABug) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> x(kQuantBlock, 1.0f);
  std::vector<int8_t> codes(kQuantBlock);
  float scale = 0.0f;
  EXPECT_DEATH(
      EncodeState(StateDType::kInt8, x.data(), 3, kQuantBlock, codes.data(), &scale, 0, 1, 0),
      "multiple of the block size");
}

// ---- fp32 -------------------------------------------------------------------------------------

TEST(StateCodecF32Test, PlainCopies) {
  const std::vector<float> x = RandomValues(100, 4);
  std::vector<float> codes(x.size()), back(x.size());
  EncodeState(StateDType::kF32, x.data(), 3, 100, codes.data(), nullptr, 1, 1, 0);
  DecodeState(StateDType::kF32, codes.data(), nullptr, 3, 100, back.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(Bits(back[i]), Bits(x[i]));
}

}  // namespace
}  // namespace zs
