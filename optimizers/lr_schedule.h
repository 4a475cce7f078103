// LrSchedule: the learning rate (and, for OneCycle, Adam's betas) as a function of the
// optimizer step, with DeepSpeed's schedulers' meaning (deepspeed/runtime/lr_schedules.py).
//
// Contract
// - At(step) is the learning rate of optimizer step `step`, counted from 0 (steps an fp16
//   overflow skipped do not count, as DeepSpeed does not step its scheduler on them). Pure and
//   const: safe to call from any thread; every rank computes the same value.
// - [Note: DeepSpeed's step offset] DeepSpeed builds a scheduler with last_batch_iteration = -1,
//   which sets the optimizer's lr for the first step, then calls scheduler.step() after every
//   applied optimizer step. So optimizer step s runs with the scheduler's value at
//   last_batch_iteration i = s - 1, and each schedule below is written in terms of i:
//     WarmupLR(min, max, W, type)     i < 0: min. W' = max(2, W). gamma = ln(i + 1) / ln(W')
//                                     (log, DeepSpeed's default) or i / W' (linear) while
//                                     i < W', then 1; lr = min + (max - min) gamma
//     WarmupDecayLR(total, ...)       WarmupLR's warm-up, then
//                                     gamma = max(0, (total - i) / max(1, total - W'))
//     WarmupCosineLR(lr0, total, r0,  i < 0: 0. Warm-up ratio r0 + (1 - r0) gamma (gamma as
//                    W, rc, type)     WarmupLR's), then
//                                     max(0, rc + (1 - rc) (1 + cos(pi p)) / 2) with
//                                     p = min(1, (i - W' + 1) / max(1, total - W')); lr = lr0 x ratio
//     OneCycle(...)                   a triangle from cycle_min_lr up to cycle_max_lr over
//                                     first_step_size steps and down over second_step_size
//                                     (optionally in stairs), then cycle_min_lr /
//                                     (1 + decay_lr_rate (i - total + 1) / decay_step_size).
//                                     With cycle_momentum, beta1 moves the other way between
//                                     cycle_max_mom and cycle_min_mom and beta2 is 0.99 (DeepSpeed
//                                     sets the betas to (momentum, 0.99)); Betas() says so
//     LRRangeTest(min, size, rate,    min (1 + rate x (i + 1) / size), the quotient floored with
//                 staircase)          staircase
//     ConstantLr(lr)                  lr (no scheduler)
//   Formulas are evaluated in double in the order DeepSpeed's Python evaluates them, so the
//   values agree with DeepSpeed's to the last bit or nearly (libm's log and cos).
// - A user schedule derives from LrSchedule.
// - The engine builds one from the config's `scheduler` section (MakeLrSchedule in
//   runtime/engine/engine_config.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace zs {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double At(int64_t step) const = 0;
  // Adam's (beta1, beta2) for optimizer step `step` when the schedule moves them (OneCycle with
  // cycle_momentum); nullopt = the optimizer's own.
  virtual std::optional<std::array<double, 2>> Betas(int64_t /*step*/) const {
    return std::nullopt;
  }
  virtual std::string Describe() const = 0;  // "WarmupCosineLR(...)"
};

enum class WarmupType { kLog, kLinear };  // DeepSpeed's warmup_type "log" | "linear"

class ConstantLr final : public LrSchedule {
 public:
  explicit ConstantLr(double lr) : lr_(lr) {}
  double At(int64_t) const override { return lr_; }
  std::string Describe() const override;

 private:
  double lr_;
};

// DeepSpeed's warm-up fraction gamma in [0, 1] at last_batch_iteration i >= 0 with W' =
// max(2, warmup_num_steps), while i < W'.
double WarmupGamma(WarmupType type, int64_t i, int64_t warmup_steps);

class WarmupLr : public LrSchedule {
 public:
  WarmupLr(double min_lr, double max_lr, int64_t warmup_steps, WarmupType type)
      : min_lr_(min_lr), max_lr_(max_lr), warmup_steps_(warmup_steps < 2 ? 2 : warmup_steps),
        type_(type) {}
  double At(int64_t step) const override;
  std::string Describe() const override;

 protected:
  virtual double Gamma(int64_t i) const;  // after the warm-up: 1
  double min_lr_, max_lr_;
  int64_t warmup_steps_;  // W' = max(2, warmup_num_steps), as DeepSpeed
  WarmupType type_;
};

class WarmupDecayLr final : public WarmupLr {
 public:
  WarmupDecayLr(int64_t total_steps, double min_lr, double max_lr, int64_t warmup_steps,
                WarmupType type)
      : WarmupLr(min_lr, max_lr, warmup_steps, type), total_steps_(total_steps) {}
  std::string Describe() const override;

 private:
  double Gamma(int64_t i) const override;
  int64_t total_steps_;
};

class WarmupCosineLr final : public LrSchedule {
 public:
  WarmupCosineLr(double base_lr, int64_t total_steps, double warmup_min_ratio,
                 int64_t warmup_steps, double cos_min_ratio, WarmupType type)
      : base_lr_(base_lr), total_steps_(total_steps), warmup_min_ratio_(warmup_min_ratio),
        warmup_steps_(warmup_steps < 2 ? 2 : warmup_steps), cos_min_ratio_(cos_min_ratio),
        type_(type) {}
  double At(int64_t step) const override;
  std::string Describe() const override;

 private:
  double base_lr_;
  int64_t total_steps_;
  double warmup_min_ratio_;
  int64_t warmup_steps_;
  double cos_min_ratio_;
  WarmupType type_;
};

struct OneCycleParams {
  double cycle_min_lr = 0;
  double cycle_max_lr = 0;
  double decay_lr_rate = 0;
  double first_step_size = 2000;
  double second_step_size = 2000;  // DeepSpeed: first_step_size when not given
  int64_t first_stair_count = 0;
  int64_t second_stair_count = 0;  // DeepSpeed: first_stair_count when not given
  double decay_step_size = 0;
  bool cycle_momentum = true;  // only for optimizers with betas
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0;
};

class OneCycleLr final : public LrSchedule {
 public:
  explicit OneCycleLr(const OneCycleParams& p) : p_(p) {}
  double At(int64_t step) const override;
  std::optional<std::array<double, 2>> Betas(int64_t step) const override;
  std::string Describe() const override;

 private:
  double ScaleFactor(int64_t i) const;  // of the cycle, at last_batch_iteration i
  double total() const { return p_.first_step_size + p_.second_step_size; }
  OneCycleParams p_;
};

class LrRangeTestLr final : public LrSchedule {
 public:
  LrRangeTestLr(double min_lr, double step_size, double step_rate, bool staircase)
      : min_lr_(min_lr), step_size_(step_size), step_rate_(step_rate), staircase_(staircase) {}
  double At(int64_t step) const override;
  std::string Describe() const override;

 private:
  double min_lr_, step_size_, step_rate_;
  bool staircase_;
};

}  // namespace zs
