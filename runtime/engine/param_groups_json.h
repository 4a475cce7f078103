// Internal to zs_engine_config: `zerostack.param_groups` read from and written to JSON, kept
// apart from engine_config.cc's scalar key table because the value is an array of objects.
//
// Contract
// - ReadParamGroups parses the whole array or nothing: on error `groups` is untouched and the
//   message (without the key path, which the caller adds) names the group by index and name
//   and the field ("[1] (\"embeddings\").betas: beta2 = 1.5 is out of range"), and for an
//   unknown field suggests the closest known one.
// - WriteParamGroups writes only the fields that are set, so a config round-trips.
// - Pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "runtime/engine/param_group_config.h"

namespace zs::internal {

std::optional<std::string> ReadParamGroups(const nlohmann::json& value,
                                           std::vector<ParamGroupConfig>& groups);
nlohmann::json WriteParamGroups(const std::vector<ParamGroupConfig>& groups);

// The fields a group accepts, for the docs ("name", "lr_scale", ...).
inline constexpr const char* kParamGroupFields[] = {"name", "lr_scale", "betas",
                                                    "eps", "weight_decay", "momentum"};

}  // namespace zs::internal
