// CreateDevice: makes the Device a spec string names, for configs, tools and tests.
//
// Specs
//   "cpu"                                     CpuDevice
//   "budgeted-cpu:<bytes>[:<pinned bytes>]"   BudgetedDevice with that device-tier capacity (and
//                                             pinned-host capacity); sizes like "2G", "512M"
//   "cuda:<ordinal>" (or "cuda" = "cuda:0")   CudaDevice, when this build has CUDA
//
// Contract
// - Kinds compiled in optionally (cuda) reach the factory through a list CMake generates from
//   the device targets it built; build flags only decide whether a kind exists. Such a kind is
//   a component library: it exists in a program that links it (zs_device_cuda, the installed
//   zerostack::cuda), and a program without it links no CUDA library.
// - Errors: an unknown kind is NotFound listing the allowed specs; a malformed argument is
//   InvalidArgument naming it; "cuda:N" without CUDA in the build, without a GPU, or with N out
//   of range is Unavailable with the reason.
// - The tracker must outlive the device. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/device/device.h"

namespace zs {

StatusOr<std::unique_ptr<Device>> CreateDevice(std::string_view spec, MemoryTracker& tracker);

// The spec forms this build accepts, e.g. {"cpu", "budgeted-cpu:<bytes>[:<pinned bytes>]", ...}.
std::vector<std::string> DeviceSpecForms();
// Whether the kind ("cpu", "budgeted-cpu", "cuda") is compiled into this build.
bool DeviceKindBuilt(std::string_view kind);

// One kind of device: made from "<kind>" or "<kind>:<argument>".
struct DeviceFactoryEntry {
  std::string kind;  // "cuda"
  std::string form;  // "cuda:<ordinal>"
  std::function<StatusOr<std::unique_ptr<Device>>(std::string_view argument, MemoryTracker&)>
      create;
};

namespace internal {
// The optional kinds this build has; defined in the file CMake generates (builtin_devices.cc).
std::vector<DeviceFactoryEntry> BuiltinOptionalDeviceKinds();
}  // namespace internal

}  // namespace zs
