#include "runtime/device/counting_device.h"

#include <fmt/format.h>

namespace zs {
namespace {

class CountingStream final : public Stream {
 public:
  explicit CountingStream(const Device* device) : Stream(device) {}
};
class CountingEvent final : public Event {
 public:
  explicit CountingEvent(const Device* device) : Event(device) {}
};

constexpr uint64_t kFirstAddress = uint64_t{1} << 44;  // above typical heap and stack mappings

}  // namespace

CountingDevice::CountingDevice(MemoryTracker& tracker, DeviceKind kind, std::string name)
    : Device(std::move(name), kind, tracker), next_(kFirstAddress) {}

bool CountingDevice::Supports(MemoryTier tier) const { return tier != MemoryTier::kNvme; }

size_t CountingDevice::Alignment(MemoryTier) const { return kHostAlignment; }

StatusOr<std::unique_ptr<Stream>> CountingDevice::CreateStream() {
  return std::unique_ptr<Stream>(new CountingStream(this));
}

StatusOr<std::unique_ptr<Event>> CountingDevice::CreateEvent() {
  return std::unique_ptr<Event>(new CountingEvent(this));
}

Status CountingDevice::CopyAsync(void*, const void*, size_t bytes, Stream&) {
  return FailedPreconditionError(
      fmt::format("{}: CopyAsync of {} bytes: a counting device holds no memory", name(), bytes));
}

Status CountingDevice::MemsetAsync(void*, int, size_t bytes, Stream&) {
  return FailedPreconditionError(
      fmt::format("{}: MemsetAsync of {} bytes: a counting device holds no memory", name(), bytes));
}

Status CountingDevice::LaunchHostFunc(Stream&, std::function<void()>) {
  return FailedPreconditionError(
      fmt::format("{}: LaunchHostFunc: a counting device runs nothing", name()));
}

Status CountingDevice::RecordEvent(Event&, Stream&) { return OkStatus(); }
Status CountingDevice::StreamWaitEvent(Stream&, Event&) { return OkStatus(); }
StatusOr<bool> CountingDevice::QueryEvent(Event&) { return true; }
Status CountingDevice::SynchronizeEvent(Event&) { return OkStatus(); }
Status CountingDevice::SynchronizeStream(Stream&) { return OkStatus(); }

StatusOr<void*> CountingDevice::AllocateRaw(size_t bytes, MemoryTier, MemoryCategory) {
  const uint64_t span = (uint64_t(bytes) + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  return reinterpret_cast<void*>(uintptr_t(next_.fetch_add(span)));
}

void CountingDevice::FreeRaw(void*, size_t, MemoryTier, MemoryCategory) {}

}  // namespace zs
