#include "optimizers/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

namespace zs {

namespace {

const char* Name(WarmupType t) { return t == WarmupType::kLog ? "log" : "linear"; }

}  // namespace

std::string ConstantLr::Describe() const { return fmt::format("constant({})", lr_); }

double WarmupGamma(WarmupType type, int64_t i, int64_t warmup_steps) {
  if (type == WarmupType::kLog) {
    const double inverse_log_warmup = 1.0 / std::log(double(warmup_steps));
    return inverse_log_warmup * std::log(double(i + 1));
  }
  return double(i) / double(warmup_steps);
}

// [Note: DeepSpeed's step offset]: step s runs with last_batch_iteration i = s - 1.
double WarmupLr::At(int64_t step) const {
  const int64_t i = step - 1;
  if (i < 0) return min_lr_;
  return min_lr_ + (max_lr_ - min_lr_) * Gamma(i);
}

double WarmupLr::Gamma(int64_t i) const {
  return i < warmup_steps_ ? WarmupGamma(type_, i, warmup_steps_) : 1.0;
}

std::string WarmupLr::Describe() const {
  return fmt::format("WarmupLR({} -> {} over {} steps, {})", min_lr_, max_lr_, warmup_steps_,
                     Name(type_));
}

double WarmupDecayLr::Gamma(int64_t i) const {
  if (i < warmup_steps_) return WarmupGamma(type_, i, warmup_steps_);
  return std::max(0.0, double(total_steps_ - i) /
                           std::max(1.0, double(total_steps_ - warmup_steps_)));
}

std::string WarmupDecayLr::Describe() const {
  return fmt::format("WarmupDecayLR({} -> {} over {} steps, {}, then linear to 0 at step {})",
                     min_lr_, max_lr_, warmup_steps_, Name(type_), total_steps_);
}

double WarmupCosineLr::At(int64_t step) const {
  const int64_t i = step - 1;
  if (i < 0) return 0.0;
  double ratio;
  if (i < warmup_steps_) {
    ratio = WarmupGamma(type_, i, warmup_steps_);
    ratio = warmup_min_ratio_ + ratio * (1.0 - warmup_min_ratio_);
  } else {
    const double real_last_step = double(i - warmup_steps_ + 1);
    const double real_total_steps = double(std::max<int64_t>(1, total_steps_ - warmup_steps_));
    const double progress = std::min(1.0, real_last_step / real_total_steps);
    ratio = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
    ratio = std::max(0.0, cos_min_ratio_ + (1.0 - cos_min_ratio_) * ratio);
  }
  return base_lr_ * ratio;
}

std::string WarmupCosineLr::Describe() const {
  return fmt::format(
      "WarmupCosineLR({} x {} -> 1 over {} steps, {}, cosine to {} x at step {})", base_lr_,
      warmup_min_ratio_, warmup_steps_, Name(type_), cos_min_ratio_, total_steps_);
}

double OneCycleLr::ScaleFactor(int64_t i) const {
  const double batch_iteration = double(i + 1);
  const double total_size = total();
  const double step_ratio = p_.first_step_size / total_size;
  const double cycle = std::floor(1.0 + batch_iteration / total_size);
  const double x = 1.0 + batch_iteration / total_size - cycle;
  double scale;
  int64_t stairs;
  if (x <= step_ratio) {
    scale = x / step_ratio;
    stairs = p_.first_stair_count;
  } else {
    scale = (x - 1.0) / (step_ratio - 1.0);
    stairs = p_.second_stair_count;
  }
  if (stairs > 0) {  // held flat over each stair, from the integral position in the cycle
    const double in_cycle = std::fmod(batch_iteration, total_size);
    const double position = in_cycle <= p_.first_step_size
                                ? in_cycle * double(stairs) / p_.first_step_size
                                : (total_size - in_cycle) * double(stairs) / p_.second_step_size;
    scale = std::floor(position) / double(stairs);
  }
  return scale;
}

double OneCycleLr::At(int64_t step) const {
  const int64_t i = step - 1;
  if (i < 0) return p_.cycle_min_lr;
  if (double(i) < total()) {
    return p_.cycle_min_lr + (p_.cycle_max_lr - p_.cycle_min_lr) * ScaleFactor(i);
  }
  if (p_.decay_step_size == 0 || p_.decay_lr_rate == 0) return p_.cycle_min_lr;
  const double interval = (double(i) - total() + 1.0) / p_.decay_step_size;
  return p_.cycle_min_lr / (1.0 + p_.decay_lr_rate * interval);
}

std::optional<std::array<double, 2>> OneCycleLr::Betas(int64_t step) const {
  if (!p_.cycle_momentum) return std::nullopt;
  constexpr double kBeta2 = 0.99;  // DeepSpeed's OneCycle sets the betas to (momentum, 0.99)
  const int64_t i = step - 1;
  if (i < 0) return std::array<double, 2>{p_.cycle_min_mom, kBeta2};
  if (double(i) < total()) {
    return std::array<double, 2>{
        p_.cycle_max_mom - (p_.cycle_max_mom - p_.cycle_min_mom) * ScaleFactor(i), kBeta2};
  }
  if (p_.decay_step_size == 0 || p_.decay_mom_rate == 0) {
    return std::array<double, 2>{p_.cycle_max_mom, kBeta2};
  }
  const double interval = (double(i) - total() + 1.0) / p_.decay_step_size;
  return std::array<double, 2>{p_.cycle_max_mom * (1.0 + p_.decay_mom_rate * interval), kBeta2};
}

std::string OneCycleLr::Describe() const {
  return fmt::format(
      "OneCycle({} -> {} over {} steps, back over {}, then decay rate {} per {} steps{})",
      p_.cycle_min_lr, p_.cycle_max_lr, p_.first_step_size, p_.second_step_size,
      p_.decay_lr_rate, p_.decay_step_size,
      p_.cycle_momentum
          ? fmt::format("; beta1 {} -> {}, beta2 0.99", p_.cycle_max_mom, p_.cycle_min_mom)
          : "");
}

double LrRangeTestLr::At(int64_t step) const {
  const int64_t i = step - 1;
  if (i < 0) return min_lr_;
  double interval = double(i + 1) / step_size_;
  if (staircase_) interval = std::floor(interval);
  return min_lr_ * (1.0 + step_rate_ * interval);
}

std::string LrRangeTestLr::Describe() const {
  return fmt::format("LRRangeTest({} x (1 + {} x step / {}{}))", min_lr_, step_rate_, step_size_,
                     staircase_ ? ", staircase" : "");
}

}  // namespace zs
