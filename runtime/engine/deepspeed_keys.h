// Internal to zs_engine_config: what a DeepSpeed config holds besides the key table, applied to
// its JSON before the table reads it.
//
// Contract
// - CheckNoNul refuses a NUL byte anywhere in the text (its offset named).
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
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/engine_config.h"

namespace zs::internal {

inline constexpr int kMaxConfigNesting = 32;

Status CheckNesting(std::string_view text);
// Refuses a text holding a NUL byte, naming its byte offset, line and column: JSON text has
// none, and the JSON parser takes the first NUL for the end of the input, so whatever followed
// it would be dropped without a word.
Status CheckNoNul(std::string_view text);
Status ApplyDeepSpeedFeatures(nlohmann::json& root);
// The DeepSpeed keys ApplyDeepSpeedFeatures and the parser's old spellings handle (outside the
// key table), for DeepSpeedKeys().
std::vector<DeepSpeedKeyInfo> DeepSpeedKeysOutsideTheTable();

}  // namespace zs::internal
