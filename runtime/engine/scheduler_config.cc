// The `scheduler` section's meaning (engine_config.h): the schedule it builds
// (optimizers/lr_schedule.h) and the parameters each of DeepSpeed's types takes.
#include <memory>
#include <string>
#include <vector>

#include "optimizers/lr_schedule.h"
#include "runtime/engine/engine_config.h"

namespace zs {

std::unique_ptr<LrSchedule> MakeLrSchedule(const SchedulerConfig& s, double base_lr) {
  const double max_lr = s.warmup_max_lr.value_or(base_lr);
  switch (s.type) {
    case SchedulerType::kNone:
      return std::make_unique<ConstantLr>(base_lr);
    case SchedulerType::kWarmupLR:
      return std::make_unique<WarmupLr>(s.warmup_min_lr, max_lr, s.warmup_num_steps,
                                        s.warmup_type);
    case SchedulerType::kWarmupDecayLR:
      return std::make_unique<WarmupDecayLr>(s.total_num_steps, s.warmup_min_lr, max_lr,
                                             s.warmup_num_steps, s.warmup_type);
    case SchedulerType::kWarmupCosineLR:
      return std::make_unique<WarmupCosineLr>(base_lr, s.total_num_steps, s.warmup_min_ratio,
                                              s.warmup_num_steps, s.cos_min_ratio,
                                              s.warmup_type);
    case SchedulerType::kOneCycle: {
      OneCycleParams p;
      p.cycle_min_lr = s.cycle_min_lr;
      p.cycle_max_lr = s.cycle_max_lr;
      p.decay_lr_rate = s.decay_lr_rate;
      p.first_step_size = s.cycle_first_step_size;
      p.second_step_size = s.cycle_second_step_size.value_or(s.cycle_first_step_size);
      p.first_stair_count = s.cycle_first_stair_count;
      p.second_stair_count = s.cycle_second_stair_count.value_or(s.cycle_first_stair_count);
      p.decay_step_size = s.decay_step_size;
      p.cycle_momentum = s.cycle_momentum;
      p.cycle_min_mom = s.cycle_min_mom;
      p.cycle_max_mom = s.cycle_max_mom;
      p.decay_mom_rate = s.decay_mom_rate;
      return std::make_unique<OneCycleLr>(p);
    }
    case SchedulerType::kLRRangeTest:
      return std::make_unique<LrRangeTestLr>(s.lr_range_test_min_lr, s.lr_range_test_step_size,
                                             s.lr_range_test_step_rate,
                                             s.lr_range_test_staircase);
  }
  return std::make_unique<ConstantLr>(base_lr);
}

const std::vector<std::string>& SchedulerParamNames(SchedulerType type) {
  static const std::vector<std::string> kNone = {};
  static const std::vector<std::string> kWarmup = {"warmup_min_lr", "warmup_max_lr",
                                                   "warmup_num_steps", "warmup_type",
                                                   "last_batch_iteration"};
  static const std::vector<std::string> kDecay = {"total_num_steps", "warmup_min_lr",
                                                  "warmup_max_lr",   "warmup_num_steps",
                                                  "warmup_type",     "last_batch_iteration"};
  static const std::vector<std::string> kCosine = {"total_num_steps", "warmup_min_ratio",
                                                   "warmup_num_steps", "cos_min_ratio",
                                                   "warmup_type",     "last_batch_iteration"};
  static const std::vector<std::string> kOneCycle = {
      "cycle_min_lr",       "cycle_max_lr",           "decay_lr_rate",
      "cycle_first_step_size", "cycle_second_step_size", "cycle_first_stair_count",
      "cycle_second_stair_count", "decay_step_size",   "cycle_momentum",
      "cycle_min_mom",      "cycle_max_mom",          "decay_mom_rate",
      "last_batch_iteration"};
  static const std::vector<std::string> kRange = {
      "lr_range_test_min_lr", "lr_range_test_step_size", "lr_range_test_step_rate",
      "lr_range_test_staircase", "last_batch_iteration"};
  switch (type) {
    case SchedulerType::kNone:
      return kNone;
    case SchedulerType::kWarmupLR:
      return kWarmup;
    case SchedulerType::kWarmupDecayLR:
      return kDecay;
    case SchedulerType::kWarmupCosineLR:
      return kCosine;
    case SchedulerType::kOneCycle:
      return kOneCycle;
    case SchedulerType::kLRRangeTest:
      return kRange;
  }
  return kNone;
}

const std::vector<std::string>& SchedulerRequiredParams(SchedulerType type) {
  static const std::vector<std::string> kNone = {};
  static const std::vector<std::string> kTotal = {"total_num_steps"};
  static const std::vector<std::string> kCycle = {"cycle_min_lr", "cycle_max_lr"};
  switch (type) {
    case SchedulerType::kWarmupDecayLR:
    case SchedulerType::kWarmupCosineLR:
      return kTotal;
    case SchedulerType::kOneCycle:
      return kCycle;
    default:
      return kNone;
  }
}

double SchedulerConfig::LearningRate(int64_t step, double base_lr) const {
  return MakeLrSchedule(*this, base_lr)->At(step);
}

}  // namespace zs
