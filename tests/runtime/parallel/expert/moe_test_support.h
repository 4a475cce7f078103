// Test helpers for the MoE MLP: a one-unit model of a MoeMlp whose parameters are filled by
// global name (so a rank holding experts 4..7 gets the same values as one rank holding all),
// a double-precision reference forward written from the formulas, and random buffers.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <vector>

#include "runtime/model/dense_unit_access.h"
#include "runtime/nn/param_init.h"
#include "runtime/parallel/expert/moe_mlp.h"

namespace zs::testing {

inline std::vector<float> Random(size_t n, uint64_t seed, float stddev = 1.0f) {
  std::vector<float> v(n);
  nn::FillNormal(seed, 11, 13, stddev, v);
  return v;
}

// Global parameter index of the layer's local parameter p: router 0, expert e's four
// parameters 1 + 4e .. 4 + 4e.
inline int GlobalParam(const MoeMlp& layer, int p) {
  return p == 0 ? 0 : 1 + 4 * layer.first_expert() + (p - 1);
}

struct MoeModel {
  std::unique_ptr<MoeMlp> layer;
  std::unique_ptr<DenseUnitAccess> access;
};

// Router weights get `router_std` (large enough for varied routing), the rest normal(0, 0.4)
// weights and normal(0, 0.2) biases.
inline MoeModel MakeModel(const MoeConfig& config, Communicator* ep, uint64_t seed,
                          float router_std = 0.6f) {
  MoeModel m;
  StatusOr<MoeMlp> layer = MoeMlp::Create(0, 0, config, ep);
  ZS_CHECK(layer.ok(), "{}", layer.status().ToString());
  m.layer = std::make_unique<MoeMlp>(std::move(*layer));
  ModelSpec spec;
  spec.units.push_back({"moe", {}});
  const std::vector<nn::ModuleParam> params = m.layer->params();
  for (const nn::ModuleParam& p : params) spec.units[0].params.push_back(p.spec);
  const MoeMlp* l = m.layer.get();
  m.access = std::make_unique<DenseUnitAccess>(
      spec, [l, seed, router_std](int unit, int param, std::span<float> values) {
        const int g = GlobalParam(*l, param);
        const bool bias = g > 0 && (g - 1) % 2 == 1;
        nn::FillNormal(seed, unit, g, g == 0 ? router_std : bias ? 0.2f : 0.4f, values);
      });
  return m;
}

struct Reference {
  std::vector<double> y;  // [T, H]
  double aux = 0;
  std::vector<int32_t> expert_of;  // [T, k]
  std::vector<bool> kept;          // [T, k]
};

inline double RefGelu(double v) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v)));
}

// The layer's math in double from the formulas of moe_mlp.h; `access` holds every expert.
inline Reference ReferenceForward(DenseUnitAccess& access, const MoeConfig& c,
                                  const std::vector<float>& x, int64_t T) {
  const int64_t H = c.hidden, F = c.ffn;
  const int E = c.num_experts, k = c.top_k;
  Reference ref;
  ref.y.assign(T * H, 0.0);
  ref.expert_of.assign(T * k, -1);
  ref.kept.assign(T * k, false);
  std::span<const float> wr = access.ParamData(0, 0);
  std::vector<double> probs(T * E), gates(T * k);
  std::vector<double> f(E, 0.0), P(E, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    double* p = &probs[t * E];
    double max = -1e300, sum = 0;
    for (int e = 0; e < E; ++e) {
      double s = 0;
      for (int64_t h = 0; h < H; ++h) s += double(x[t * H + h]) * wr[e * H + h];
      p[e] = s;
      max = std::max(max, s);
    }
    for (int e = 0; e < E; ++e) sum += (p[e] = std::exp(p[e] - max));
    for (int e = 0; e < E; ++e) p[e] /= sum;
    std::vector<int> order(E);
    for (int e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    double s = 0;
    for (int j = 0; j < k; ++j) s += p[order[j]];
    for (int j = 0; j < k; ++j) {
      ref.expert_of[t * k + j] = order[j];
      gates[t * k + j] = k == 1 ? p[order[0]] : p[order[j]] / s;
    }
    f[order[0]] += 1.0 / T;
    for (int e = 0; e < E; ++e) P[e] += p[e] / T;
  }
  for (int e = 0; e < E; ++e) ref.aux += c.aux_loss_coef * E * f[e] * P[e];
  // Capacity: first choices in token order, then second choices.
  const int64_t capacity = ExpertCapacity(c, T);
  std::vector<int64_t> taken(E, 0);
  for (int j = 0; j < k; ++j) {
    for (int64_t t = 0; t < T; ++t) {
      const int e = ref.expert_of[t * k + j];
      if (taken[e] < capacity) {
        ++taken[e];
        ref.kept[t * k + j] = true;
      }
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int j = 0; j < k; ++j) {
      if (!ref.kept[t * k + j]) continue;
      const int e = ref.expert_of[t * k + j];
      std::span<const float> w1 = access.ParamData(0, 1 + 4 * e),
                             b1 = access.ParamData(0, 2 + 4 * e);
      std::span<const float> w2 = access.ParamData(0, 3 + 4 * e),
                             b2 = access.ParamData(0, 4 + 4 * e);
      std::vector<double> act(F);
      for (int64_t i = 0; i < F; ++i) {
        double s = b1[i];
        for (int64_t h = 0; h < H; ++h) s += double(x[t * H + h]) * w1[i * H + h];
        act[i] = RefGelu(s);
      }
      for (int64_t h = 0; h < H; ++h) {
        double s = b2[h];
        for (int64_t i = 0; i < F; ++i) s += act[i] * w2[h * F + i];
        ref.y[t * H + h] += gates[t * k + j] * s;
      }
    }
  }
  return ref;
}

}  // namespace zs::testing
