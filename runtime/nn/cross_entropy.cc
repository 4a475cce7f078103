#include "runtime/nn/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "runtime/base/check.h"
#include "runtime/nn/softmax_kernels.h"

namespace zs::nn {

double CrossEntropyForward(const float* logits, std::span<const int32_t> targets, int64_t vocab,
                           float* probs) {
  double total = 0.0;
  for (size_t r = 0; r < targets.size(); ++r) {
    const int32_t target = targets[r];
    ZS_CHECK(target >= 0 && target < vocab, "target {} at row {} is not in [0, {})", target, r,
             vocab);
    const float* l = logits + static_cast<int64_t>(r) * vocab;
    float* p = probs + static_cast<int64_t>(r) * vocab;
    const float max = RowMax(l, vocab);
    const float target_logit = l[target];  // read before p (which may alias l) overwrites it
    const double sum = ExpShifted(l, vocab, max, p);
    total += static_cast<double>(max) + std::log(sum) - static_cast<double>(target_logit);
    ScaleRow(p, vocab, static_cast<float>(1.0 / sum));
  }
  return targets.empty() ? 0.0 : total / static_cast<double>(targets.size());
}

void CrossEntropyBackward(const float* probs, std::span<const int32_t> targets, int64_t vocab,
                          float seed, float* dlogits) {
  if (targets.empty()) return;
  const float scale = seed / static_cast<float>(targets.size());
  for (size_t r = 0; r < targets.size(); ++r) {
    const float* p = probs + static_cast<int64_t>(r) * vocab;
    float* d = dlogits + static_cast<int64_t>(r) * vocab;
    for (int64_t j = 0; j < vocab; ++j) d[j] = scale * p[j];
    d[targets[r]] -= scale;
  }
}

}  // namespace zs::nn
