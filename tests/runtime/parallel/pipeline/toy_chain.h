// Test helper: a toy model for pipeline tests, a chain of K layers h <- tanh(W h + b) of width D
// with a squared-error loss, and the PipelineChunk that runs a contiguous range of its layers.
//
// Contract: header-only, for tests. The chunk and the single-process reference call the same
// layer functions in the same order, so a pipelined run must match the reference bit for bit:
// activations travel as exact fp32 copies and every chunk accumulates its parameter gradients in
// micro-batch order, as the reference does. Micro-batch inputs and targets depend only on the
// micro-batch index. A chunk is used by one thread at a time.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "runtime/base/splitmix64.h"
#include "runtime/parallel/pipeline/pipeline_chunk.h"

namespace zs::testing {

struct ToyChain {
  int layers = 0;
  int width = 0;
  std::vector<std::vector<float>> w;  // per layer: width x width, row-major
  std::vector<std::vector<float>> b;  // per layer: width

  static ToyChain Make(int layers, int width, uint64_t seed) {
    ToyChain chain{layers, width, {}, {}};
    uint64_t counter = 0;  // values depend only on (seed, index)
    auto uniform = [&] {
      return float(double(SplitMix64(seed * 0x10000 + counter++) >> 11) * 0x1.0p-53 - 0.5);
    };
    for (int k = 0; k < layers; ++k) {
      std::vector<float> w(size_t(width) * width), b(width);
      for (float& x : w) x = 1.6f * uniform();
      for (float& x : b) x = 0.4f * uniform();
      chain.w.push_back(std::move(w));
      chain.b.push_back(std::move(b));
    }
    return chain;
  }
};

inline std::vector<float> ToyInput(int micro_batch, int width) {
  std::vector<float> x(width);
  for (int i = 0; i < width; ++i) x[i] = std::sin(0.7f * float(micro_batch + 1) + float(i));
  return x;
}
inline std::vector<float> ToyTarget(int micro_batch, int width) {
  std::vector<float> t(width);
  for (int i = 0; i < width; ++i) t[i] = 0.5f * std::cos(0.3f * float(micro_batch) - float(i));
  return t;
}

// y = tanh(W x + b).
inline void ToyLayerForward(const ToyChain& c, int k, std::span<const float> x,
                            std::span<float> y) {
  const int d = c.width;
  for (int i = 0; i < d; ++i) {
    float acc = c.b[k][i];
    for (int j = 0; j < d; ++j) acc += c.w[k][size_t(i) * d + j] * x[j];
    y[i] = std::tanh(acc);
  }
}

// Given x, y = layer(x) and dy: dW += (dy * (1 - y^2)) x^T, db += dy * (1 - y^2), dx = W^T (...).
inline void ToyLayerBackward(const ToyChain& c, int k, std::span<const float> x,
                             std::span<const float> y, std::span<const float> dy,
                             std::vector<float>& dw, std::vector<float>& db, std::span<float> dx) {
  const int d = c.width;
  std::vector<float> dz(d);
  for (int i = 0; i < d; ++i) dz[i] = dy[i] * (1.f - y[i] * y[i]);
  for (int i = 0; i < d; ++i) {
    db[i] += dz[i];
    for (int j = 0; j < d; ++j) dw[size_t(i) * d + j] += dz[i] * x[j];
  }
  for (int j = 0; j < d; ++j) {
    float acc = 0;
    for (int i = 0; i < d; ++i) acc += c.w[k][size_t(i) * d + j] * dz[i];
    dx[j] = acc;
  }
}

inline float ToyLoss(std::span<const float> y, std::span<const float> t) {
  float loss = 0;
  for (size_t i = 0; i < y.size(); ++i) loss += 0.5f * (y[i] - t[i]) * (y[i] - t[i]);
  return loss;
}

// Layers [begin, end) of the chain as one pipeline chunk; `first`/`last`: whether it begins or
// ends the model. Gradients accumulate in dw/db (indexed by layer - begin).
class ToyChunk : public PipelineChunk {
 public:
  ToyChunk(const ToyChain& chain, int begin, int end, bool first, bool last)
      : chain_(chain), begin_(begin), end_(end), first_(first), last_(last) {
    for (int k = begin; k < end; ++k) {
      dw.emplace_back(size_t(chain.width) * chain.width, 0.f);
      db.emplace_back(chain.width, 0.f);
    }
  }

  int64_t input_elements() const override { return first_ ? 0 : chain_.width; }
  int64_t output_elements() const override { return last_ ? 0 : chain_.width; }

  StatusOr<float> Forward(int mb, std::span<const float> input, std::span<float> output) override {
    std::vector<std::vector<float>>& acts = activations_[mb];
    acts.clear();
    acts.push_back(first_ ? ToyInput(mb, chain_.width)
                          : std::vector<float>(input.begin(), input.end()));
    for (int k = begin_; k < end_; ++k) {
      std::vector<float> y(chain_.width);
      ToyLayerForward(chain_, k, acts.back(), y);
      acts.push_back(std::move(y));
    }
    ++forwards;
    if (last_) return ToyLoss(acts.back(), ToyTarget(mb, chain_.width));
    std::copy(acts.back().begin(), acts.back().end(), output.begin());
    return 0.f;
  }

  Status Backward(int mb, std::span<const float> output_grad,
                  std::span<float> input_grad) override {
    auto it = activations_.find(mb);
    if (it == activations_.end()) return InternalError("no activations for the micro-batch");
    std::vector<std::vector<float>>& acts = it->second;
    std::vector<float> dy(chain_.width);
    if (last_) {
      const std::vector<float> t = ToyTarget(mb, chain_.width);
      for (int i = 0; i < chain_.width; ++i) dy[i] = acts.back()[i] - t[i];
    } else {
      dy.assign(output_grad.begin(), output_grad.end());
    }
    for (int k = end_ - 1; k >= begin_; --k) {
      std::vector<float> dx(chain_.width);
      const int l = k - begin_;
      ToyLayerBackward(chain_, k, acts[l], acts[l + 1], dy, dw[l], db[l], dx);
      dy = std::move(dx);
    }
    if (!first_) std::copy(dy.begin(), dy.end(), input_grad.begin());
    activations_.erase(it);
    ++backwards;
    return OkStatus();
  }

  size_t live_activations() const { return activations_.size(); }

  std::vector<std::vector<float>> dw, db;
  int forwards = 0, backwards = 0;

 private:
  const ToyChain& chain_;
  const int begin_, end_;
  const bool first_, last_;
  std::map<int, std::vector<std::vector<float>>>
      activations_;  // per micro-batch: layer inputs + output
};

// The whole chain on one rank, micro-batches in order: the losses, and dw/db accumulated over
// `steps` passes of micro-batches 0..m-1.
struct ToyReference {
  std::vector<float> losses;
  std::vector<std::vector<float>> dw, db;
};
inline ToyReference RunToyReference(const ToyChain& chain, int micro_batches, int steps) {
  ToyChunk all(chain, 0, chain.layers, true, true);
  ToyReference out;
  for (int s = 0; s < steps; ++s) {
    out.losses.clear();
    for (int mb = 0; mb < micro_batches; ++mb) {
      out.losses.push_back(*all.Forward(mb, {}, {}));
      all.Backward(mb, {}, {}).IgnoreError();
    }
  }
  out.dw = all.dw;
  out.db = all.db;
  return out;
}

}  // namespace zs::testing
