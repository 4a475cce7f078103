// softmax_kernels.h against a float64 std::exp reference (of the float x - shift): every
// element within 2 float ulps, the sum within 1e-6 relative, partial last vectors and aliasing,
// and an element's bits independent of where in the row it sits.
#include "runtime/nn/softmax_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/base/splitmix64.h"

namespace zs::nn {
namespace {

std::vector<float> RandomRow(int64_t n, uint64_t seed, float scale) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double u = double(SplitMix64(seed * 1000003u + uint64_t(i)) >> 11) * 0x1p-53;
    x[size_t(i)] = float((2.0 * u - 1.0) * scale);
  }
  return x;
}

// Distance in units in the last place between two finite floats of the same sign.
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::llabs(int64_t(ia) - int64_t(ib));
}

TEST(SoftmaxKernels, MatchFloat64ReferenceAtEveryLength) {
  std::printf("softmax kernels run on %s\n", SoftmaxKernelTarget());
  for (int64_t n : {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 1023, 1024, 1025, 2048, 5001}) {
    const std::vector<float> x = RandomRow(n, uint64_t(n) + 1, 20.0f);
    double ref_max = -std::numeric_limits<double>::infinity();
    for (float v : x) ref_max = std::max(ref_max, double(v));
    const float max = RowMax(x.data(), n);
    ASSERT_EQ(double(max), ref_max) << "n " << n;
    if (n == 0) {
      EXPECT_EQ(ExpShifted(x.data(), 0, 0.0f, nullptr), 0.0);
      continue;
    }
    std::vector<float> e(size_t(n), -1.0f);
    const double sum = ExpShifted(x.data(), n, max, e.data());
    double ref_sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      // The kernel shifts in float, as the scalar std::exp(l[j] - max) did: compare the exp.
      const float shifted = x[size_t(i)] - max;
      const double ref = std::exp(double(shifted));
      ref_sum += ref;
      EXPECT_LE(UlpDistance(e[size_t(i)], float(ref)), 2) << "n " << n << " element " << i;
    }
    EXPECT_NEAR(sum / ref_sum, 1.0, 1e-6) << "n " << n;
    // In place (out aliasing x), and the scale.
    std::vector<float> y = x;
    EXPECT_EQ(ExpShifted(y.data(), n, max, y.data()), sum);
    EXPECT_EQ(0, std::memcmp(y.data(), e.data(), size_t(n) * sizeof(float)));
    ScaleRow(y.data(), n, 0.25f);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[size_t(i)], e[size_t(i)] * 0.25f);
  }
}

TEST(SoftmaxKernels, ElementBitsDoNotDependOnPosition) {
  // The same values at offsets 0..16 of a longer row (so each lands in the body and in a
  // partial last vector at some offset): the same exp bits.
  const std::vector<float> values = RandomRow(37, 99, 30.0f);
  std::vector<float> first(values.size());
  ExpShifted(values.data(), int64_t(values.size()), 1.5f, first.data());
  for (int offset = 1; offset <= 16; ++offset) {
    std::vector<float> row(values.size() + size_t(offset), 0.0f);
    std::copy(values.begin(), values.end(), row.begin() + offset);
    std::vector<float> out(row.size());
    ExpShifted(row.data(), int64_t(row.size()), 1.5f, out.data());
    EXPECT_EQ(0, std::memcmp(out.data() + offset, first.data(), values.size() * sizeof(float)))
        << "offset " << offset;
  }
}

TEST(SoftmaxKernels, UnderflowIsZeroNotNan) {
  const std::vector<float> x = {0.0f, -200.0f, -1e30f, -std::numeric_limits<float>::max()};
  std::vector<float> e(x.size());
  const double sum = ExpShifted(x.data(), int64_t(x.size()), 0.0f, e.data());
  EXPECT_EQ(e[0], 1.0f);
  for (size_t i = 1; i < e.size(); ++i) EXPECT_EQ(e[i], 0.0f) << i;
  EXPECT_EQ(sum, 1.0);
}

}  // namespace
}  // namespace zs::nn
