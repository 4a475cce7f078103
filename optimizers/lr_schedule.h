// LrSchedule: the learning rate as a function of the optimizer step.
//
// Contract
// - At(step) is the learning rate of optimizer step `step`, counted from 0. Pure and const:
//   safe to call from any thread; every rank computes the same value.
// - Built-ins (the formulas are exact, in double):
//     ConstantLr(lr)                                 lr
//     LinearWarmupLr(min, max, warmup)               min + (max - min) * step / warmup while
//                                                    step < warmup, then max
//     WarmupCosineLr(min, max, warmup, total, ratio) the warm-up above, then
//                                                    max * (ratio + (1 - ratio) * (1 + cos(pi p)) / 2)
//                                                    with p = (step - warmup) / (total - warmup)
//                                                    clamped to [0, 1] (p = 1 when total <= warmup)
//   A user schedule derives from LrSchedule.
// - The engine builds one from the config's `scheduler` section (MakeLrSchedule in
//   runtime/engine/engine_config.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zs {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double At(int64_t step) const = 0;
  virtual std::string Describe() const = 0;  // "WarmupCosineLR(0 -> 0.003 over 20, ...)"
};

class ConstantLr final : public LrSchedule {
 public:
  explicit ConstantLr(double lr) : lr_(lr) {}
  double At(int64_t) const override { return lr_; }
  std::string Describe() const override;

 private:
  double lr_;
};

class LinearWarmupLr : public LrSchedule {
 public:
  LinearWarmupLr(double min_lr, double max_lr, int64_t warmup_steps)
      : min_lr_(min_lr), max_lr_(max_lr), warmup_steps_(warmup_steps) {}
  double At(int64_t step) const override;
  std::string Describe() const override;

 protected:
  // The warm-up value while step < warmup_steps; false after it.
  bool InWarmup(int64_t step, double& lr) const;
  double min_lr_, max_lr_;
  int64_t warmup_steps_;
};

class WarmupCosineLr final : public LinearWarmupLr {
 public:
  WarmupCosineLr(double min_lr, double max_lr, int64_t warmup_steps, int64_t total_steps,
                 double min_ratio)
      : LinearWarmupLr(min_lr, max_lr, warmup_steps), total_steps_(total_steps),
        min_ratio_(min_ratio) {}
  double At(int64_t step) const override;
  std::string Describe() const override;

 private:
  int64_t total_steps_;
  double min_ratio_;
};

}  // namespace zs
