// Internal to zs_engine_config: how a config's errors show a JSON value, shared by the key
// table (engine_config.cc) and DeepSpeed's other keys (deepspeed_keys.cc).
//
// Contract
// - Pure inline functions; any thread. Shown() bounds the text to 60 characters.
#pragma once

#include <fmt/format.h>

#include <cctype>
#include <nlohmann/json.hpp>
#include <string>

namespace zs::internal {

using Json = nlohmann::json;

inline std::string Shown(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

inline std::string KindOf(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

inline std::string Got(const Json& value) { return fmt::format("got {} {}", KindOf(value), Shown(value)); }

inline std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace zs::internal
