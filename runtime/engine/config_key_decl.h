// Internal to zs_engine_config: the declaration of one config key ([Note: one key table] in
// engine_config.cc) and the typed makers the table is written with (IntKey, SizeKey,
// NumberKey, OptionalNumberKey, OptionalIntKey, BoolKey, IgnoredBoolKey, StringKey, EnumKey,
// BetasKey, ParamGroupsKey). Each maker sets the key's info (type, allowed values, description)
// and its reader (JSON value -> field, with the range check, returning the message without the
// key path) and writer (field -> JSON value).
//
// Contract
// - Pure; the getters passed to the makers pick a field of an EngineConfig.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/base/check.h"
#include "runtime/engine/config_json.h"
#include "runtime/engine/engine_config.h"
#include "runtime/engine/param_groups_json.h"

namespace zs::internal {

// [Note: one key table] (engine_config.cc): one accepted key.
struct KeyDecl {
  ConfigKeyInfo info;
  // Reads `value` into the config; on error returns a message without the key path (the
  // caller adds the path and the allowed values).
  std::function<std::optional<std::string>(const Json& value, EngineConfig& config)> read;
  // The field as JSON; empty for ignored keys (they have no field).
  std::function<Json(const EngineConfig& config)> write;
};

// The integral value of a JSON number (5e8 included) or why it is not one.
inline std::optional<int64_t> AsInteger(const Json& value, std::string* why) {
  if (value.is_number_integer() && !value.is_number_unsigned()) return value.get<int64_t>();
  if (value.is_number_unsigned()) {
    uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      *why = fmt::format("{} does not fit in a 64-bit integer", u);
      return std::nullopt;
    }
    return static_cast<int64_t>(u);
  }
  if (value.is_number_float()) {
    double d = value.get<double>();
    if (!std::isfinite(d) || d != std::trunc(d)) {
      *why = fmt::format("expected an integer, got the non-integral number {}", Shown(value));
      return std::nullopt;
    }
    if (std::fabs(d) >= 9.2233720368547758e18) {
      *why = fmt::format("{} does not fit in a 64-bit integer", Shown(value));
      return std::nullopt;
    }
    return static_cast<int64_t>(d);
  }
  *why = fmt::format("expected an integer, {}", Got(value));
  return std::nullopt;
}

inline std::string IntRangeText(int64_t lo, int64_t hi) {
  if (hi == std::numeric_limits<int64_t>::max()) return fmt::format(">= {}", lo);
  if (hi - lo <= 5) {
    std::string text;
    for (int64_t v = lo; v <= hi; ++v) text += (v == lo ? "" : ", ") + std::to_string(v);
    return text;
  }
  return fmt::format("{} to {}", lo, hi);
}

// The field a getter returns, for a mutable or a const config.
template <typename Get>
using FieldOf =
    std::remove_reference_t<decltype(std::declval<Get>()(std::declval<EngineConfig&>()))>;

inline constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();

// An integer key; `type` is "integer" or "size" (a count of elements or bytes).
template <typename Get>
KeyDecl IntKey(std::string path, Get get, int64_t lo, int64_t hi, std::string description,
               std::string type = "integer") {
  using T = FieldOf<Get>;
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  KeyDecl key;
  key.info = {std::move(path), std::move(type), "", IntRangeText(lo, hi), std::move(description)};
  key.read = [get, lo, hi](const Json& value, EngineConfig& c) -> std::optional<std::string> {
    std::string why;
    std::optional<int64_t> v = AsInteger(value, &why);
    if (!v) return why;
    if (*v < lo || *v > hi) return fmt::format("{} is out of range", *v);
    get(c) = static_cast<T>(*v);
    return std::nullopt;
  };
  key.write = [get](const EngineConfig& c) {
    return Json(static_cast<int64_t>(get(const_cast<EngineConfig&>(c))));
  };
  return key;
}

template <typename Get>
KeyDecl SizeKey(std::string path, Get get, int64_t lo, std::string description) {
  return IntKey(std::move(path), get, lo, kNoMax, std::move(description), "size");
}

// A real interval with open or closed ends; hi = +inf for none.
struct Interval {
  double lo;
  bool lo_closed;
  double hi = std::numeric_limits<double>::infinity();
  bool hi_closed = false;
  bool Contains(double v) const {
    return (lo_closed ? v >= lo : v > lo) && (hi_closed ? v <= hi : v < hi);
  }
  std::string Text() const {
    if (std::isinf(hi)) return fmt::format("{} {}", lo_closed ? ">=" : ">", lo);
    return fmt::format("{}{}, {}{}", lo_closed ? "[" : "(", lo, hi, hi_closed ? "]" : ")");
  }
};

template <typename Get>
KeyDecl NumberKey(std::string path, Get get, Interval range, std::string description) {
  static_assert(std::is_same_v<FieldOf<Get>, double>);
  KeyDecl key;
  key.info = {std::move(path), "number", "", range.Text(), std::move(description)};
  key.read = [get, range](const Json& value, EngineConfig& c) -> std::optional<std::string> {
    if (!value.is_number()) return fmt::format("expected a number, {}", Got(value));
    double v = value.get<double>();
    if (!range.Contains(v)) return fmt::format("{} is out of range", Shown(value));
    get(c) = v;
    return std::nullopt;
  };
  key.write = [get](const EngineConfig& c) { return Json(get(const_cast<EngineConfig&>(c))); };
  return key;
}

// A number that may be left unset (std::optional): null in EngineConfigToJson's output is
// skipped there, so an unset key round-trips as absent.
template <typename Get>
KeyDecl OptionalNumberKey(std::string path, Get get, Interval range, std::string description) {
  static_assert(std::is_same_v<FieldOf<Get>, std::optional<double>>);
  KeyDecl key;
  key.info = {std::move(path), "number", "", range.Text() + " or null", std::move(description)};
  key.read = [get, range](const Json& value, EngineConfig& c) -> std::optional<std::string> {
    if (value.is_null()) {
      get(c).reset();
      return std::nullopt;
    }
    if (!value.is_number()) return fmt::format("expected a number, {}", Got(value));
    double v = value.get<double>();
    if (!range.Contains(v)) return fmt::format("{} is out of range", Shown(value));
    get(c) = v;
    return std::nullopt;
  };
  key.write = [get](const EngineConfig& c) {
    const std::optional<double>& v = get(const_cast<EngineConfig&>(c));
    return v ? Json(*v) : Json(nullptr);
  };
  return key;
}

// An integer >= lo that may be left unset (as OptionalNumberKey).
template <typename Get>
KeyDecl OptionalIntKey(std::string path, Get get, int64_t lo, std::string description) {
  static_assert(std::is_same_v<FieldOf<Get>, std::optional<int64_t>>);
  KeyDecl key;
  key.info = {std::move(path), "integer", "", IntRangeText(lo, kNoMax) + " or null",
              std::move(description)};
  key.read = [get, lo](const Json& value, EngineConfig& c) -> std::optional<std::string> {
    if (value.is_null()) {
      get(c).reset();
      return std::nullopt;
    }
    std::string why;
    std::optional<int64_t> v = AsInteger(value, &why);
    if (!v) return why;
    if (*v < lo) return fmt::format("{} is out of range", *v);
    get(c) = *v;
    return std::nullopt;
  };
  key.write = [get](const EngineConfig& c) {
    const std::optional<int64_t>& v = get(const_cast<EngineConfig&>(c));
    return v ? Json(*v) : Json(nullptr);
  };
  return key;
}

inline std::optional<std::string> ReadBool(const Json& value, bool* out) {
  if (!value.is_boolean()) {
    return fmt::format("expected a JSON boolean (true or false), {}", Got(value));
  }
  *out = value.get<bool>();
  return std::nullopt;
}

template <typename Get>
KeyDecl BoolKey(std::string path, Get get, std::string description) {
  static_assert(std::is_same_v<FieldOf<Get>, bool>);
  KeyDecl key;
  key.info = {std::move(path), "boolean", "", "true, false", std::move(description)};
  key.read = [get](const Json& value, EngineConfig& c) { return ReadBool(value, &get(c)); };
  key.write = [get](const EngineConfig& c) { return Json(get(const_cast<EngineConfig&>(c))); };
  return key;
}

// A DeepSpeed key that only affects logging: accepted (it must be a boolean), no effect.
inline KeyDecl IgnoredBoolKey(std::string path, std::string description) {
  KeyDecl key;
  key.info = {std::move(path),        "boolean",       "false", "true, false (accepted, no effect)",
              std::move(description), /*ignored=*/true};
  key.read = [](const Json& value, EngineConfig&) {
    bool unused = false;
    return ReadBool(value, &unused);
  };
  return key;
}

template <typename Get>
KeyDecl StringKey(std::string path, Get get, std::string allowed, std::string description) {
  static_assert(std::is_same_v<FieldOf<Get>, std::string>);
  KeyDecl key;
  key.info = {std::move(path), "string", "", std::move(allowed), std::move(description)};
  key.read = [get](const Json& value, EngineConfig& c) -> std::optional<std::string> {
    if (!value.is_string()) return fmt::format("expected a string, {}", Got(value));
    get(c) = value.get<std::string>();
    return std::nullopt;
  };
  key.write = [get](const EngineConfig& c) { return Json(get(const_cast<EngineConfig&>(c))); };
  return key;
}


template <typename Get>
KeyDecl EnumKey(std::string path, Get get, std::vector<std::pair<std::string, FieldOf<Get>>> names,
                bool case_insensitive, std::string description) {
  using E = FieldOf<Get>;
  std::string allowed;
  for (const auto& [name, e] : names) allowed += (allowed.empty() ? "" : ", ") + name;
  if (case_insensitive) allowed += " (case-insensitive)";
  KeyDecl key;
  key.info = {std::move(path), "string", "", std::move(allowed), std::move(description)};
  key.read = [get, names, case_insensitive](const Json& value,
                                            EngineConfig& c) -> std::optional<std::string> {
    if (!value.is_string()) return fmt::format("expected a string, {}", Got(value));
    std::string text = value.get<std::string>();
    for (const auto& [name, e] : names) {
      if (case_insensitive ? Lower(name) == Lower(text) : name == text) {
        get(c) = e;
        return std::nullopt;
      }
    }
    return fmt::format("{} is not an allowed value", Shown(value));
  };
  key.write = [get, names](const EngineConfig& c) {
    E e = get(const_cast<EngineConfig&>(c));
    for (const auto& [name, value] : names) {
      if (value == e) return Json(name);
    }
    ZS_CHECK(false, "enum value {} has no name", static_cast<int>(e));
    return Json();
  };
  return key;
}

inline KeyDecl BetasKey() {
  KeyDecl key;
  key.info = {"optimizer.params.betas", "[number, number]", "", "two numbers, each in [0, 1)",
              "Adam's (beta1, beta2): decay rates of the first and second moment estimates"};
  key.read = [](const Json& value, EngineConfig& c) -> std::optional<std::string> {
    if (!value.is_array() || value.size() != 2 || !value[0].is_number() || !value[1].is_number()) {
      return fmt::format("expected an array of two numbers, {}", Got(value));
    }
    for (int i = 0; i < 2; ++i) {
      double b = value[i].get<double>();
      if (!(b >= 0.0 && b < 1.0)) {
        return fmt::format("beta{} = {} is out of range", i + 1, Shown(value[i]));
      }
      c.optimizer.betas[i] = b;
    }
    return std::nullopt;
  };
  key.write = [](const EngineConfig& c) {
    return Json::array({c.optimizer.betas[0], c.optimizer.betas[1]});
  };
  return key;
}

// zerostack.param_groups: an array of objects, read by param_groups_json.cc.
inline KeyDecl ParamGroupsKey() {
  KeyDecl key;
  key.info = {"zerostack.param_groups", "array of objects", "",
              "objects with a unique \"name\" and any of lr_scale (>= 0), betas, eps, "
              "weight_decay, momentum (SGD)",
              "hyper-parameters per parameter group (ParamSpec::group); unset fields inherit "
              "optimizer.params"};
  key.read = [](const Json& value, EngineConfig& c) {
    return internal::ReadParamGroups(value, c.zerostack.param_groups);
  };
  key.write = [](const EngineConfig& c) {
    return internal::WriteParamGroups(c.zerostack.param_groups);
  };
  return key;
}

}  // namespace zs::internal
