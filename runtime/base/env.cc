#include "runtime/base/env.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <string>

namespace zs {

std::optional<std::string> GetEnvString(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

StatusOr<int64_t> ParseByteSize(std::string_view text) {
  std::string s(text);
  if (s.empty()) return InvalidArgumentError("empty size");
  size_t pos = 0;
  long long value = 0;
  try {
    value = std::stoll(s, &pos, 10);
  } catch (...) {
    return InvalidArgumentError(fmt::format("'{}' is not a size (e.g. 4096, 64k, 16M, 1G)", s));
  }
  std::string suffix = s.substr(pos);
  int64_t scale = 1;
  if (suffix.empty()) {
    scale = 1;
  } else if (suffix == "k" || suffix == "K" || suffix == "KiB") {
    scale = int64_t{1} << 10;
  } else if (suffix == "m" || suffix == "M" || suffix == "MiB") {
    scale = int64_t{1} << 20;
  } else if (suffix == "g" || suffix == "G" || suffix == "GiB") {
    scale = int64_t{1} << 30;
  } else {
    return InvalidArgumentError(fmt::format("'{}' has an unknown size suffix '{}'", s, suffix));
  }
  return int64_t(value) * scale;
}

StatusOr<int64_t> ParseEnvInt(const char* name, int64_t fallback) {
  auto v = GetEnvString(name);
  if (!v) return fallback;
  auto parsed = ParseByteSize(*v);
  if (!parsed.ok()) {
    return InvalidArgumentError(
        fmt::format("environment variable {}='{}': {}", name, *v, parsed.status().message()));
  }
  return *parsed;
}

StatusOr<double> ParseEnvDouble(const char* name, double fallback) {
  auto v = GetEnvString(name);
  if (!v) return fallback;
  char* end = nullptr;
  double d = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0') {
    return InvalidArgumentError(fmt::format("environment variable {}='{}' is not a number", name, *v));
  }
  return d;
}

StatusOr<bool> ParseEnvBool(const char* name, bool fallback) {
  auto v = GetEnvString(name);
  if (!v) return fallback;
  std::string s = *v;
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  return InvalidArgumentError(fmt::format(
      "environment variable {}='{}' is not a boolean (use 1/0, true/false, on/off)", name, *v));
}

}  // namespace zs
