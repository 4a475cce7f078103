// GELU, tanh approximation (as GPT-2): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
//
// Contract
// - Elementwise over n floats; no parameters, no state. GeluBackward takes the x GeluForward
//   got and writes dx = dy * gelu'(x) (overwrites). y may alias x; dx may alias dy.
#pragma once

#include <cstdint>

namespace zs::nn {

void GeluForward(const float* x, int64_t n, float* y);
void GeluBackward(const float* x, const float* dy, int64_t n, float* dx);

}  // namespace zs::nn
