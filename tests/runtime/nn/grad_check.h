// Test helpers for runtime/nn: random buffers and a finite-difference gradient check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/model/dense_unit_access.h"
#include "runtime/nn/param_init.h"

namespace zs::nn::testing {

inline std::vector<float> RandomVector(size_t n, uint64_t seed, float stddev = 1.0f) {
  std::vector<float> v(n);
  FillNormal(seed, 7, 7, stddev, v);
  return v;
}

// A one-unit model of the module's parameters, filled with random values large enough that
// gradients are well above float noise (gains around 1).
inline ModelSpec OneUnit(const std::vector<ModuleParam>& params) {
  ModelSpec spec;
  spec.units.push_back({"unit", {}});
  for (const ModuleParam& p : params) spec.units[0].params.push_back(p.spec);
  return spec;
}

inline ParamInit RandomInit(const std::vector<ModuleParam>& params, uint64_t seed) {
  return [params, seed](int unit, int param, std::span<float> values) {
    const InitKind kind = params[param].init;
    FillNormal(seed, unit, param,
               kind == InitKind::kNormal || kind == InitKind::kNormalResidual ? 0.4f : 0.2f,
               values);
    if (kind == InitKind::kOnes) {
      for (float& v : values) v += 1.0f;
    }
  };
}

inline bool Close(double a, double b, double rtol, double atol) {
  return std::abs(a - b) <= atol + rtol * std::max(std::abs(a), std::abs(b));
}

// Up to `count` indices spread over [0, n).
inline std::vector<size_t> Sample(size_t n, size_t count) {
  std::vector<size_t> out;
  if (n <= count) {
    for (size_t i = 0; i < n; ++i) out.push_back(i);
  } else {
    for (size_t i = 0; i < count; ++i) out.push_back((i * n) / count + (i * 7) % (n / count));
  }
  return out;
}

// Central differences of loss() against analytic[i] for the sampled entries of values.
inline void CheckFiniteDifferences(const std::string& what, std::span<float> values,
                                   std::span<const float> analytic,
                                   const std::function<double()>& loss, float eps = 1e-2f,
                                   double rtol = 2e-2, double atol = 2e-3, size_t count = 24) {
  ASSERT_EQ(values.size(), analytic.size()) << what;
  for (size_t i : Sample(values.size(), count)) {
    const float saved = values[i];
    values[i] = saved + eps;
    const double plus = loss();
    values[i] = saved - eps;
    const double minus = loss();
    values[i] = saved;
    const double numeric = (plus - minus) / (2.0 * eps);
    EXPECT_TRUE(Close(analytic[i], numeric, rtol, atol))
        << what << "[" << i << "]: analytic " << analytic[i] << " numeric " << numeric;
  }
}

}  // namespace zs::nn::testing
