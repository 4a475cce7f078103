#include "optimizers/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

namespace zs {

std::string ConstantLr::Describe() const { return fmt::format("constant({})", lr_); }

bool LinearWarmupLr::InWarmup(int64_t step, double& lr) const {
  step = std::max<int64_t>(step, 0);
  if (step >= warmup_steps_) return false;
  const double t = double(step) / double(warmup_steps_);
  lr = min_lr_ + (max_lr_ - min_lr_) * t;
  return true;
}

double LinearWarmupLr::At(int64_t step) const {
  double lr;
  return InWarmup(step, lr) ? lr : max_lr_;
}

std::string LinearWarmupLr::Describe() const {
  return fmt::format("WarmupLR({} -> {} over {} steps)", min_lr_, max_lr_, warmup_steps_);
}

double WarmupCosineLr::At(int64_t step) const {
  double lr;
  if (InWarmup(step, lr)) return lr;
  double p = 1.0;
  if (total_steps_ > warmup_steps_) {
    p = std::min(1.0, double(step - warmup_steps_) / double(total_steps_ - warmup_steps_));
  }
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  return max_lr_ * (min_ratio_ + (1.0 - min_ratio_) * cosine);
}

std::string WarmupCosineLr::Describe() const {
  return fmt::format("WarmupCosineLR({} -> {} over {} steps, cosine to {} x at step {})",
                     min_lr_, max_lr_, warmup_steps_, min_ratio_, total_steps_);
}

}  // namespace zs
