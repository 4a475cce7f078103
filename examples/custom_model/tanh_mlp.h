// TanhMlp: a hand-written model (no runtime/nn) wrapped by the ZeroEngine through the
// UnitAccess hooks. It shows the whole surface a model needs: a ModelSpec (one gather unit per
// layer, weight decay as metadata), an initializer that depends only on (seed, unit, param), and
// forward/backward passes bracketed per unit. Used by examples/wrap_custom_model.cc and by the
// engine tests (a model small enough to check bit for bit).
//
// Layer k maps h_k to h_{k+1} = tanh(W_k h_k + b_k) (the last layer is linear); the loss is the
// mean over the batch of 0.5 * |h_L - y|^2. Plain loops in float; single-threaded; the object
// keeps the activations of the last forward for its backward.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/splitmix64.h"
#include "runtime/base/status.h"
#include "runtime/model/model_spec.h"
#include "runtime/model/unit_access.h"

namespace zs::examples {

class TanhMlp {
 public:
  // widths = {in, hidden..., out}; one unit per layer.
  explicit TanhMlp(std::vector<int> widths) : widths_(std::move(widths)) {}

  int layers() const { return int(widths_.size()) - 1; }
  int in_width() const { return widths_.front(); }
  int out_width() const { return widths_.back(); }

  ModelSpec Spec() const {
    ModelSpec spec;
    for (int k = 0; k < layers(); ++k) {
      UnitSpec unit{"layer." + std::to_string(k), {}};
      unit.params.push_back({"weight", {widths_[k + 1], widths_[k]}, /*weight_decay=*/true});
      unit.params.push_back({"bias", {widths_[k + 1]}, /*weight_decay=*/false});
      spec.units.push_back(std::move(unit));
    }
    return spec;
  }

  // Uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)) from a counter hash of (seed, unit, param, i):
  // the same values whatever rank asks.
  ParamInit Init(uint64_t seed) const {
    std::vector<int> widths = widths_;
    return [seed, widths](int unit, int param, std::span<float> values) {
      const float bound = 1.0f / std::sqrt(float(widths[unit]));
      for (size_t i = 0; i < values.size(); ++i) {
        const uint64_t h = SplitMix64(seed ^ SplitMix64(uint64_t(unit) * 131 + uint64_t(param)) ^
                                      SplitMix64(i + 1));
        values[i] = bound * (2.0f * float(h >> 40) / float(1 << 24) - 1.0f);
      }
    };
  }

  // One forward and backward over `batch` samples (x: batch x in, y: batch x out). Returns the
  // mean loss; gradients are accumulated through `access`, seeded with backward_scale().
  StatusOr<double> ForwardBackward(UnitAccess& access, const std::vector<float>& x,
                                   const std::vector<float>& y, int batch) {
    const int L = layers();
    acts_.assign(size_t(L + 1), {});
    acts_[0] = x;
    for (int k = 0; k < L; ++k) {
      ZS_RETURN_IF_ERROR(access.BeginForward(k));
      const int n_in = widths_[k], n_out = widths_[k + 1];
      std::span<const float> w = access.Param(k, 0), b = access.Param(k, 1);
      std::vector<float>& out = acts_[k + 1];
      out.assign(size_t(batch) * n_out, 0.0f);
      for (int s = 0; s < batch; ++s) {
        for (int o = 0; o < n_out; ++o) {
          float acc = b[o];
          for (int i = 0; i < n_in; ++i)
            acc += w[size_t(o) * n_in + i] * acts_[k][size_t(s) * n_in + i];
          out[size_t(s) * n_out + o] = k + 1 < L ? std::tanh(acc) : acc;
        }
      }
      ZS_RETURN_IF_ERROR(access.EndForward(k));
    }
    const int n_out = out_width();
    double loss = 0.0;
    std::vector<float> delta(size_t(batch) * n_out);
    const float seed = access.backward_scale() / float(batch);
    for (size_t i = 0; i < delta.size(); ++i) {
      const float d = acts_[L][i] - y[i];
      loss += 0.5 * double(d) * double(d);
      delta[i] = d * seed;
    }
    for (int k = L - 1; k >= 0; --k) {
      ZS_RETURN_IF_ERROR(access.BeginBackward(k));
      const int n_in = widths_[k], no = widths_[k + 1];
      std::span<const float> w = access.Param(k, 0);
      std::span<float> gw = access.Grad(k, 0), gb = access.Grad(k, 1);
      std::vector<float> prev(size_t(batch) * n_in, 0.0f);
      for (int s = 0; s < batch; ++s) {
        for (int o = 0; o < no; ++o) {
          const float d = delta[size_t(s) * no + o];
          gb[o] += d;
          for (int i = 0; i < n_in; ++i) {
            gw[size_t(o) * n_in + i] += d * acts_[k][size_t(s) * n_in + i];
            prev[size_t(s) * n_in + i] += d * w[size_t(o) * n_in + i];
          }
        }
      }
      if (k > 0) {  // through the tanh of layer k-1's output
        for (size_t i = 0; i < prev.size(); ++i) prev[i] *= 1.0f - acts_[k][i] * acts_[k][i];
      }
      delta = std::move(prev);
      ZS_RETURN_IF_ERROR(access.EndBackward(k));
    }
    return loss / batch;
  }

 private:
  std::vector<int> widths_;
  std::vector<std::vector<float>> acts_;
};

}  // namespace zs::examples
