// Internal to zs_engine_config: replaces the "auto" values of a parsed config's JSON by what
// the program supplies ([Note: "auto" as the Hugging Face integration fills it],
// program_values.h), before the key table reads it.
//
// Contract
// - ResolveAutoValues walks every object of `root`; each string "auto" is replaced (and listed
//   in `filled`, each object's keys in sorted order) or the call fails with InvalidArgument
//   naming the key and the program value that would resolve it. On error `root` may be partly
//   replaced.
// - Pure function.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/program_values.h"

namespace zs::internal {

Status ResolveAutoValues(nlohmann::json& root, const ProgramValues& program,
                         std::vector<AutoFill>* filled);

}  // namespace zs::internal
