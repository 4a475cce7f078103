#include "runtime/engine/loss_scaler.h"

#include <algorithm>
#include <cmath>

namespace zs {

LossScaler::LossScaler(const Fp16Config& config) {
  if (!config.enabled) return;
  if (config.loss_scale > 0) {
    scale_ = float(config.loss_scale);
    return;
  }
  dynamic_ = true;
  scale_ = std::ldexp(1.0f, config.initial_scale_power);
  min_scale_ = float(config.min_loss_scale);
  window_ = config.loss_scale_window;
  hysteresis_ = hysteresis_left_ = std::max<int64_t>(1, config.hysteresis);
}

void LossScaler::Update(bool overflow) {
  if (!dynamic_) return;
  if (overflow) {
    good_steps_ = 0;
    // As DeepSpeed: once the hysteresis is used up, every further overflow halves the scale
    // until a full window of good steps restores it.
    if (hysteresis_left_ <= 1) {
      scale_ = std::max(min_scale_, scale_ / 2);
    } else {
      --hysteresis_left_;
    }
    return;
  }
  if (++good_steps_ >= window_) {
    scale_ *= 2;
    good_steps_ = 0;
    hysteresis_left_ = hysteresis_;
  }
}

}  // namespace zs
