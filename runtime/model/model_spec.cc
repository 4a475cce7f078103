#include "runtime/model/model_spec.h"

#include <fmt/format.h>

namespace zs {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t UnitSpec::numel() const {
  int64_t n = 0;
  for (const ParamSpec& p : params) n += p.numel();
  return n;
}

bool UnitSpec::frozen() const {
  if (params.empty()) return false;
  for (const ParamSpec& p : params) {
    if (p.trainable) return false;
  }
  return true;
}

int64_t ModelSpec::numel() const {
  int64_t n = 0;
  for (const UnitSpec& u : units) n += u.numel();
  return n;
}

bool ModelSpec::SameShapes(const ModelSpec& other) const {
  if (units.size() != other.units.size()) return false;
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].params.size() != other.units[u].params.size()) return false;
    for (size_t p = 0; p < units[u].params.size(); ++p) {
      if (units[u].params[p].shape != other.units[u].params[p].shape) return false;
    }
  }
  return true;
}

Status ModelSpec::Validate() const {
  if (units.empty()) return InvalidArgumentError("model has no units");
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].name.empty()) return InvalidArgumentError(fmt::format("unit {} has no name", u));
    for (size_t p = 0; p < units[u].params.size(); ++p) {
      for (int64_t d : units[u].params[p].shape) {
        if (d < 0) {
          return InvalidArgumentError(fmt::format("unit '{}' parameter '{}' has dimension {} < 0",
                                                  units[u].name, units[u].params[p].name, d));
        }
      }
    }
  }
  return OkStatus();
}

}  // namespace zs
