// Cross-entropy of logits against integer targets: loss = mean over rows of
// -log softmax(logits[row])[target[row]], computed stably (max-subtracted log-sum-exp).
//
// Contract
// - Plain functions on caller-owned buffers; no parameters, no state.
// - CrossEntropyForward writes softmax(logits) into probs [rows, vocab] (probs may alias
//   logits: each row is read before it is overwritten) and returns the mean loss, summed in
//   double. Targets outside [0, vocab) are a ZS_CHECK failure: models validate user input first.
// - CrossEntropyBackward writes dlogits = seed * (probs - onehot(target)) / rows (overwrites;
//   dlogits may alias probs). seed is d(objective)/d(mean loss), e.g. UnitAccess's
//   backward_scale().
#pragma once

#include <cstdint>
#include <span>

namespace zs::nn {

double CrossEntropyForward(const float* logits, std::span<const int32_t> targets, int64_t vocab,
                           float* probs);
void CrossEntropyBackward(const float* probs, std::span<const int32_t> targets, int64_t vocab,
                          float seed, float* dlogits);

}  // namespace zs::nn
