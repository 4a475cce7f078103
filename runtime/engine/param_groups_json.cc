#include "runtime/engine/param_groups_json.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "runtime/base/edit_distance.h"

namespace zs::internal {
namespace {

using Json = nlohmann::json;

std::optional<std::string> ReadNumber(const Json& v, const char* field, double lo, bool lo_open,
                                      double hi, bool hi_open, double& out) {
  if (!v.is_number()) return fmt::format("{}: expected a number, got {}", field, v.dump());
  const double d = v.get<double>();
  const bool ok = std::isfinite(d) && (lo_open ? d > lo : d >= lo) && (hi_open ? d < hi : d <= hi);
  if (!ok) {
    return fmt::format("{}: {} is out of range (allowed: {}{}, {}{})", field, v.dump(),
                       lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
  }
  out = d;
  return std::nullopt;
}

constexpr double kInf = HUGE_VAL;

std::optional<std::string> ReadGroup(const Json& object, ParamGroupConfig& g) {
  if (!object.is_object()) return fmt::format("expected an object, got {}", object.dump());
  if (!object.contains("name")) return std::string("\"name\" is required");
  for (const auto& [field, v] : object.items()) {
    std::optional<std::string> error;
    if (field == "name") {
      if (!v.is_string() || v.get<std::string>().empty()) {
        error = fmt::format("name: expected a non-empty string, got {}", v.dump());
      } else {
        g.name = v.get<std::string>();
      }
    } else if (field == "lr_scale") {
      error = ReadNumber(v, "lr_scale", 0.0, false, kInf, true, g.lr_scale);
    } else if (field == "betas") {
      if (!v.is_array() || v.size() != 2) {
        error = fmt::format("betas: expected an array of two numbers, got {}", v.dump());
      } else {
        std::array<double, 2> b{};
        error = ReadNumber(v[0], "betas[0]", 0.0, false, 1.0, true, b[0]);
        if (!error) error = ReadNumber(v[1], "betas[1]", 0.0, false, 1.0, true, b[1]);
        if (!error) g.betas = b;
      }
    } else if (field == "eps") {
      double d = 0;
      error = ReadNumber(v, "eps", 0.0, true, kInf, true, d);
      if (!error) g.eps = d;
    } else if (field == "weight_decay") {
      double d = 0;
      error = ReadNumber(v, "weight_decay", 0.0, false, kInf, true, d);
      if (!error) g.weight_decay = d;
    } else if (field == "momentum") {
      double d = 0;
      error = ReadNumber(v, "momentum", 0.0, false, 1.0, true, d);
      if (!error) g.momentum = d;
    } else {
      std::string closest;
      size_t best = std::max<size_t>(2, field.size() / 3) + 1;
      for (const char* known : kParamGroupFields) {
        if (size_t d = EditDistance(field, known); d < best) {
          best = d;
          closest = known;
        }
      }
      std::string allowed;
      for (const char* known : kParamGroupFields) allowed += (allowed.empty() ? "" : ", ") + std::string(known);
      error = closest.empty()
                  ? fmt::format("unknown field \"{}\" (allowed: {})", field, allowed)
                  : fmt::format("unknown field \"{}\"; did you mean \"{}\"?", field, closest);
    }
    if (error) return error;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> ReadParamGroups(const Json& value,
                                           std::vector<ParamGroupConfig>& groups) {
  if (!value.is_array()) return fmt::format("expected an array of objects, got {}", value.dump());
  std::vector<ParamGroupConfig> parsed;
  std::set<std::string> names;
  for (size_t i = 0; i < value.size(); ++i) {
    ParamGroupConfig g;
    const Json& object = value[i];
    std::string label = fmt::format("[{}]", i);
    if (object.is_object() && object.contains("name") && object["name"].is_string()) {
      label += fmt::format(" (\"{}\")", object["name"].get<std::string>());
    }
    if (std::optional<std::string> error = ReadGroup(object, g)) {
      return fmt::format("{}: {}", label, *error);
    }
    if (!names.insert(g.name).second) {
      return fmt::format("{}: the name \"{}\" is used by an earlier group", label, g.name);
    }
    parsed.push_back(std::move(g));
  }
  groups = std::move(parsed);
  return std::nullopt;
}

Json WriteParamGroups(const std::vector<ParamGroupConfig>& groups) {
  Json out = Json::array();
  for (const ParamGroupConfig& g : groups) {
    Json o = {{"name", g.name}, {"lr_scale", g.lr_scale}};
    if (g.betas) o["betas"] = Json::array({(*g.betas)[0], (*g.betas)[1]});
    if (g.eps) o["eps"] = *g.eps;
    if (g.weight_decay) o["weight_decay"] = *g.weight_decay;
    if (g.momentum) o["momentum"] = *g.momentum;
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace zs::internal
