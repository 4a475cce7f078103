#include "runtime/device/device_factory.h"

#include <fmt/format.h>

#include <optional>

#include "runtime/base/env.h"
#include "runtime/device/budgeted_device.h"
#include "runtime/device/cpu_device.h"

namespace zs {
namespace {

// Kinds that exist only in some builds, and why a build may lack them.
struct OptionalKind {
  std::string_view kind;
  std::string_view form;
  std::string_view missing_reason;
};
constexpr OptionalKind kOptionalKinds[] = {
    {"cuda", "cuda:<ordinal>",
     "this build has no CUDA support (configure with -DZS_WITH_CUDA=ON where a CUDA toolkit is "
     "installed)"},
};

StatusOr<size_t> ParseCapacity(std::string_view spec, std::string_view text) {
  StatusOr<int64_t> bytes = ParseByteSize(text);
  if (!bytes.ok() || *bytes <= 0) {
    return InvalidArgumentError(
        fmt::format("device spec '{}': capacity '{}' is not a positive "
                    "size like 512M or 2G",
                    spec, text));
  }
  return size_t(*bytes);
}

std::vector<DeviceFactoryEntry> AllKinds() {
  std::vector<DeviceFactoryEntry> kinds;
  kinds.push_back(
      {"cpu", "cpu",
       [](std::string_view arg, MemoryTracker& tracker) -> StatusOr<std::unique_ptr<Device>> {
         if (!arg.empty()) {
           return InvalidArgumentError(
               fmt::format("device spec 'cpu:{}': cpu takes no argument", arg));
         }
         return std::unique_ptr<Device>(std::make_unique<CpuDevice>(tracker));
       }});
  kinds.push_back(
      {"budgeted-cpu", "budgeted-cpu:<bytes>[:<pinned bytes>]",
       [](std::string_view arg, MemoryTracker& tracker) -> StatusOr<std::unique_ptr<Device>> {
         const std::string spec = fmt::format("budgeted-cpu:{}", arg);
         if (arg.empty()) {
           return InvalidArgumentError(
               "device spec 'budgeted-cpu' needs a capacity, e.g. budgeted-cpu:2G");
         }
         const size_t colon = arg.find(':');
         ZS_ASSIGN_OR_RETURN(size_t capacity, ParseCapacity(spec, arg.substr(0, colon)));
         std::optional<size_t> pinned;
         if (colon != std::string_view::npos) {
           ZS_ASSIGN_OR_RETURN(pinned, ParseCapacity(spec, arg.substr(colon + 1)));
         }
         return std::unique_ptr<Device>(
             std::make_unique<BudgetedDevice>(tracker, capacity, pinned));
       }});
  for (DeviceFactoryEntry& entry : internal::BuiltinOptionalDeviceKinds()) {
    kinds.push_back(std::move(entry));
  }
  return kinds;
}

}  // namespace

std::vector<std::string> DeviceSpecForms() {
  std::vector<std::string> forms;
  for (const DeviceFactoryEntry& entry : AllKinds()) forms.push_back(entry.form);
  return forms;
}

bool DeviceKindBuilt(std::string_view kind) {
  for (const DeviceFactoryEntry& entry : AllKinds()) {
    if (entry.kind == kind) return true;
  }
  return false;
}

StatusOr<std::unique_ptr<Device>> CreateDevice(std::string_view spec, MemoryTracker& tracker) {
  const size_t colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  const std::string_view arg = colon == std::string_view::npos ? "" : spec.substr(colon + 1);
  std::vector<DeviceFactoryEntry> kinds = AllKinds();
  for (const DeviceFactoryEntry& entry : kinds) {
    if (entry.kind != kind) continue;
    StatusOr<std::unique_ptr<Device>> device = entry.create(arg, tracker);
    if (!device.ok() && device.status().message().find(spec) == std::string::npos) {
      return device.status().WithContext(fmt::format("device '{}'", spec));
    }
    return device;
  }
  std::string allowed;
  for (const DeviceFactoryEntry& entry : kinds) {
    allowed += allowed.empty() ? "" : ", ";
    allowed += entry.form;
  }
  for (const OptionalKind& optional : kOptionalKinds) {
    if (optional.kind == kind) {
      return UnavailableError(fmt::format("device '{}' is unavailable: {}; this build has: {}",
                                          spec, optional.missing_reason, allowed));
    }
  }
  for (const OptionalKind& optional : kOptionalKinds) {
    if (!DeviceKindBuilt(optional.kind)) {
      allowed += fmt::format(", {} (not in this build)", optional.form);
    }
  }
  return NotFoundError(fmt::format("unknown device '{}'; allowed: {}", spec, allowed));
}

}  // namespace zs
