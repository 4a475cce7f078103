// Environment knobs: every tunable that can come from the environment is declared once, typed
// and documented, and read through these helpers (NCCL_PARAM style).
//
// Contract
// - GetEnv* read the variable on each call and never fail: a malformed value is an error
//   returned by the ParseEnv* forms, and the Get* forms log nothing and fall back to the
//   default only when the variable is unset. A set but malformed variable is a Status error
//   from ParseEnv*, which callers at start-up should prefer.
// - Thread-safe (reads only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/base/status.h"

namespace zs {

std::optional<std::string> GetEnvString(const char* name);

// Parses an integer (decimal; suffixes k/m/g for 2^10/20/30 allowed). Unset: `fallback`.
// Set but malformed: InvalidArgument naming the variable and its value.
StatusOr<int64_t> ParseEnvInt(const char* name, int64_t fallback);
// Parses a double. Unset: `fallback`.
StatusOr<double> ParseEnvDouble(const char* name, double fallback);
// Parses 1/0/true/false/yes/no/on/off. Unset: `fallback`.
StatusOr<bool> ParseEnvBool(const char* name, bool fallback);

// Parses "123", "4k", "16M", "1G" (binary units) into bytes.
StatusOr<int64_t> ParseByteSize(std::string_view text);

}  // namespace zs
