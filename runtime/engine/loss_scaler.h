// LossScaler: fp16 loss scaling, static or dynamic (DeepSpeed's DynamicLossScaler rules).
//
// Contract
// - scale() is the factor the loss (its gradient seed) is multiplied by; gradients are divided
//   by it before the optimizer step.
// - Update(overflow) is called once per optimizer step with the overflow flag every rank agreed
//   on (so every rank's scaler stays identical). Dynamic rules: an overflow step is skipped; it
//   halves the scale (not below min_scale) once `hysteresis` overflows have been seen since the
//   last change; `window` consecutive steps without overflow double the scale and restore the
//   hysteresis. A static scaler (or one for bf16/fp32, scale 1) never changes.
// - A plain value; no threads.
#pragma once

#include <cstdint>

#include "runtime/engine/engine_config.h"

namespace zs {

class LossScaler {
 public:
  // Scale 1, never changes (fp32, bf16).
  LossScaler() = default;
  explicit LossScaler(const Fp16Config& config);

  float scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  void Update(bool overflow);

  // What changes as it runs (checkpoints save and restore it; the config gives the rest).
  struct State {
    float scale = 1.0f;
    int64_t hysteresis_left = 2;
    int64_t good_steps = 0;
  };
  State state() const { return {scale_, hysteresis_left_, good_steps_}; }
  void set_state(const State& s) {
    scale_ = s.scale;
    hysteresis_left_ = s.hysteresis_left;
    good_steps_ = s.good_steps;
  }

 private:
  float scale_ = 1.0f;
  bool dynamic_ = false;
  float min_scale_ = 1.0f;
  int64_t window_ = 1000;
  int64_t hysteresis_ = 2;
  int64_t hysteresis_left_ = 2;
  int64_t good_steps_ = 0;
};

}  // namespace zs
