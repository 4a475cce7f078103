// ParamGroupConfig: hyper-parameters that one named group of parameters sets apart from
// optimizer.params, as the config's `zerostack.param_groups` lists them.
//
// Contract
// - A parameter joins a group through its spec (ParamSpec::group, runtime/model/model_spec.h):
//   metadata, never inferred from names or positions. A parameter whose group the config does
//   not list (the empty name included) steps with optimizer.params.
// - Each field left unset inherits optimizer.params' value. The learning rate is scaled, not
//   replaced: a group's lr at step s is lr_scale times the schedule's lr at s (Megatron's
//   lr_mult), so warm-up and decay apply to every group alike. weight_decay applies only to the
//   group's parameters whose spec asks for decay. momentum is SGD's; it may differ between
//   groups but must be zero exactly when optimizer.params.momentum is (one state layout for
//   the whole model: optimizers/optimizer_spec.h, [Note: parameter groups]).
// - The engine rejects a config group that names no parameter of the model (a typo would
//   otherwise go unnoticed), naming the group and the model's group names.
// - Plain values.
#pragma once

#include <array>
#include <optional>
#include <string>

namespace zs {

struct ParamGroupConfig {
  std::string name;                            // matches ParamSpec::group; not empty
  double lr_scale = 1.0;                       // >= 0 (0 freezes the group)
  std::optional<std::array<double, 2>> betas;  // Adam / Lion (beta1, beta2)
  std::optional<double> eps;                   // Adam, Adagrad
  std::optional<double> weight_decay;          // for parameters whose spec asks for decay
  std::optional<double> momentum;              // SGD

  bool operator==(const ParamGroupConfig&) const = default;
};

}  // namespace zs
