// Internal to zs_engine_config: what a DeepSpeed config holds besides the key table, applied to
// its JSON before the table reads it.
//
// Contract
// - CheckNesting refuses a text nested more than kMaxConfigNesting levels ([Note: bounded
//   input]), before any JSON parser recurses into it.
// - ApplyDeepSpeedFeatures ([Note: DeepSpeed's other keys]): removes what is accepted without
//   effect (monitoring sections, no-op knobs, features turned off), refuses features not built
//   as "not implemented" naming them, and rewrites the old offload spellings; on error `root`
//   may be partly changed.
// - Pure functions; any thread.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include "runtime/base/status.h"

namespace zs::internal {

inline constexpr int kMaxConfigNesting = 32;

Status CheckNesting(std::string_view text);
Status ApplyDeepSpeedFeatures(nlohmann::json& root);

}  // namespace zs::internal
