#include "runtime/device/cuda_device.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "runtime/base/log.h"

namespace zs {
namespace {

// "cudaMalloc(64.0 MiB) on cuda:0 failed: out of memory (cudaErrorMemoryAllocation)".
Status CudaStatus(cudaError_t err, std::string_view call, std::string_view what) {
  std::string message = fmt::format("{} on {} failed: {} ({})", call, what, cudaGetErrorString(err),
                                    cudaGetErrorName(err));
  switch (err) {
    case cudaErrorMemoryAllocation:
      return OutOfMemoryError(std::move(message));
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
      return UnavailableError(std::move(message));
    default:
      return InternalError(std::move(message));
  }
}

class CudaStream final : public Stream {
 public:
  CudaStream(const CudaDevice* device, cudaStream_t stream) : Stream(device), stream_(stream) {}
  ~CudaStream() override {
    // Finish queued work first (the contract of stream.h), then release the stream.
    const auto& device = static_cast<const CudaDevice&>(this->device());
    cudaError_t err = cudaSetDevice(device.ordinal());
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream_);
    if (err == cudaSuccess) err = cudaStreamDestroy(stream_);
    if (err != cudaSuccess) {
      ZS_LOG(kWarn, "{}", CudaStatus(err, "cudaStreamDestroy", device.name()).ToString());
    }
  }
  cudaStream_t get() const { return stream_; }

 private:
  const cudaStream_t stream_;
};

class CudaEvent final : public Event {
 public:
  CudaEvent(const CudaDevice* device, cudaEvent_t event) : Event(device), event_(event) {}
  ~CudaEvent() override {
    const auto& device = static_cast<const CudaDevice&>(this->device());
    cudaError_t err = cudaSetDevice(device.ordinal());
    if (err == cudaSuccess) err = cudaEventDestroy(event_);
    if (err != cudaSuccess) {
      ZS_LOG(kWarn, "{}", CudaStatus(err, "cudaEventDestroy", device.name()).ToString());
    }
  }
  cudaEvent_t get() const { return event_; }

 private:
  const cudaEvent_t event_;
};

cudaStream_t AsCuda(const Device* device, Stream& stream) {
  ZS_CHECK(&stream.device() == device, "a stream of {} used on {}", stream.device().name(),
           device->name());
  return static_cast<CudaStream&>(stream).get();
}

cudaEvent_t AsCuda(const Device* device, Event& event) {
  ZS_CHECK(&event.device() == device, "an event of {} used on {}", event.device().name(),
           device->name());
  return static_cast<CudaEvent&>(event).get();
}

size_t RoundUp(size_t bytes, size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

void RunHostFunc(void* arg) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(arg));
  (*fn)();
}

}  // namespace

int CudaDeviceCount() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear it, so later calls do not report it
    return 0;
  }
  return count;
}

StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(int ordinal, MemoryTracker& tracker) {
  const std::string name = fmt::format("cuda:{}", ordinal);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return UnavailableError(
        fmt::format("{} is unavailable: no usable CUDA driver or GPU "
                    "(cudaGetDeviceCount: {} ({}))",
                    name, cudaGetErrorString(err), cudaGetErrorName(err)));
  }
  if (ordinal < 0 || ordinal >= count) {
    return UnavailableError(
        fmt::format("{} is unavailable: this machine has {} CUDA device(s)", name, count));
  }
  std::unique_ptr<CudaDevice> device(new CudaDevice(ordinal, tracker));
  ZS_RETURN_IF_ERROR(device->MakeCurrent("cudaSetDevice"));
  return device;
}

CudaDevice::CudaDevice(int ordinal, MemoryTracker& tracker)
    : Device(fmt::format("cuda:{}", ordinal), DeviceKind::kCuda, tracker), ordinal_(ordinal) {}

Status CudaDevice::MakeCurrent(std::string_view call) const {
  cudaError_t err = cudaSetDevice(ordinal_);
  if (err != cudaSuccess)
    return CudaStatus(err, fmt::format("cudaSetDevice (for {})", call), name());
  return OkStatus();
}

bool CudaDevice::Supports(MemoryTier tier) const { return tier != MemoryTier::kNvme; }

size_t CudaDevice::Alignment(MemoryTier tier) const {
  return tier == MemoryTier::kDevice ? 256 : kHostAlignment;
}

StatusOr<void*> CudaDevice::AllocateRaw(size_t bytes, MemoryTier tier, MemoryCategory category) {
  void* ptr = nullptr;
  if (tier == MemoryTier::kHost) {
    ptr = std::aligned_alloc(kHostAlignment, RoundUp(bytes, kHostAlignment));
    if (ptr == nullptr) {
      return OutOfMemoryError(fmt::format("out of host memory: {}: aligned_alloc failed; {}",
                                          DescribeRequest(bytes, tier, category),
                                          tracker().Snapshot().InUseSummary(tier)));
    }
    return ptr;
  }
  ZS_RETURN_IF_ERROR(MakeCurrent("AllocateRaw"));
  const bool pinned = tier == MemoryTier::kPinnedHost;
  const char* call = pinned ? "cudaHostAlloc" : "cudaMalloc";
  cudaError_t err = pinned
                        ? cudaHostAlloc(&ptr, RoundUp(bytes, kHostAlignment), cudaHostAllocDefault)
                        : cudaMalloc(&ptr, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // allocation failures are not sticky; clear the last error
    Status status = CudaStatus(err, fmt::format("{}({} bytes)", call, bytes), name());
    if (status.code() != StatusCode::kOutOfMemory) return status;
    size_t free_bytes = 0, total_bytes = 0;
    std::string free_note;
    if (!pinned && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      free_note = fmt::format("; the GPU has {} free of {}", FormatBytes(int64_t(free_bytes)),
                              FormatBytes(int64_t(total_bytes)));
    }
    (void)cudaGetLastError();
    return OutOfMemoryError(fmt::format("out of {} memory: {}: {}; {}{}", MemoryTierName(tier),
                                        DescribeRequest(bytes, tier, category), status.message(),
                                        tracker().Snapshot().InUseSummary(tier), free_note));
  }
  if (reinterpret_cast<uintptr_t>(ptr) % Alignment(tier) != 0) {
    if (pinned)
      cudaFreeHost(ptr);
    else
      cudaFree(ptr);
    return InternalError(fmt::format("{}({} bytes) on {} returned {}, not {}-byte aligned", call,
                                     bytes, name(), ptr, Alignment(tier)));
  }
  return ptr;
}

void CudaDevice::FreeRaw(void* ptr, size_t bytes, MemoryTier tier, MemoryCategory category) {
  if (tier == MemoryTier::kHost) {
    std::free(ptr);
    return;
  }
  const bool pinned = tier == MemoryTier::kPinnedHost;
  Status current = MakeCurrent("FreeRaw");
  cudaError_t err = pinned ? cudaFreeHost(ptr) : cudaFree(ptr);
  if (!current.ok() || err != cudaSuccess) {
    // A free cannot return an error; a failure here means the context is already broken.
    ZS_LOG(kWarn, "{}",
           CudaStatus(err, fmt::format("{}({} bytes)", pinned ? "cudaFreeHost" : "cudaFree", bytes),
                      name())
               .ToString());
  }
}

StatusOr<std::unique_ptr<Stream>> CudaDevice::CreateStream() {
  ZS_RETURN_IF_ERROR(MakeCurrent("cudaStreamCreateWithFlags"));
  cudaStream_t stream = nullptr;
  cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (err != cudaSuccess) return CudaStatus(err, "cudaStreamCreateWithFlags", name());
  return std::unique_ptr<Stream>(std::make_unique<CudaStream>(this, stream));
}

StatusOr<std::unique_ptr<Event>> CudaDevice::CreateEvent() {
  ZS_RETURN_IF_ERROR(MakeCurrent("cudaEventCreateWithFlags"));
  cudaEvent_t event = nullptr;
  cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (err != cudaSuccess) return CudaStatus(err, "cudaEventCreateWithFlags", name());
  return std::unique_ptr<Event>(std::make_unique<CudaEvent>(this, event));
}

Status CudaDevice::CopyAsync(void* dst, const void* src, size_t bytes, Stream& stream) {
  cudaStream_t s = AsCuda(this, stream);
  ZS_RETURN_IF_ERROR(CheckCopyArgs("CopyAsync", dst, src, bytes));
  if (bytes == 0) return OkStatus();
  ZS_RETURN_IF_ERROR(MakeCurrent("cudaMemcpyAsync"));
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
  if (err != cudaSuccess) {
    return CudaStatus(
        err, fmt::format("cudaMemcpyAsync({} bytes, dst {}, src {})", bytes, dst, src), name());
  }
  return OkStatus();
}

Status CudaDevice::MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) {
  cudaStream_t s = AsCuda(this, stream);
  ZS_RETURN_IF_ERROR(CheckCopyArgs("MemsetAsync", dst, nullptr, bytes));
  if (bytes == 0) return OkStatus();
  ZS_RETURN_IF_ERROR(MakeCurrent("MemsetAsync"));
  cudaPointerAttributes attributes{};
  cudaError_t err = cudaPointerGetAttributes(&attributes, dst);
  if (err != cudaSuccess) {
    return CudaStatus(err, fmt::format("cudaPointerGetAttributes({})", dst), name());
  }
  if (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged) {
    err = cudaMemsetAsync(dst, value, bytes, s);
    if (err != cudaSuccess) {
      return CudaStatus(err, fmt::format("cudaMemsetAsync({} bytes at {})", bytes, dst), name());
    }
    return OkStatus();
  }
  // Host memory (pinned or pageable): set it on the host, in stream order.
  return LaunchHostFunc(stream, [dst, value, bytes] { std::memset(dst, value, bytes); });
}

Status CudaDevice::LaunchHostFunc(Stream& stream, std::function<void()> fn) {
  cudaStream_t s = AsCuda(this, stream);
  if (!fn) return InvalidArgumentError(fmt::format("LaunchHostFunc on {}: empty function", name()));
  ZS_RETURN_IF_ERROR(MakeCurrent("cudaLaunchHostFunc"));
  auto* heap_fn = new std::function<void()>(std::move(fn));
  cudaError_t err = cudaLaunchHostFunc(s, &RunHostFunc, heap_fn);
  if (err != cudaSuccess) {
    delete heap_fn;
    return CudaStatus(err, "cudaLaunchHostFunc", name());
  }
  return OkStatus();
}

Status CudaDevice::RecordEvent(Event& event, Stream& stream) {
  cudaStream_t s = AsCuda(this, stream);
  cudaEvent_t e = AsCuda(this, event);
  ZS_RETURN_IF_ERROR(MakeCurrent("cudaEventRecord"));
  cudaError_t err = cudaEventRecord(e, s);
  if (err != cudaSuccess) return CudaStatus(err, "cudaEventRecord", name());
  return OkStatus();
}

Status CudaDevice::StreamWaitEvent(Stream& stream, Event& event) {
  cudaStream_t s = AsCuda(this, stream);
  cudaEvent_t e = AsCuda(this, event);
  ZS_RETURN_IF_ERROR(MakeCurrent("cudaStreamWaitEvent"));
  cudaError_t err = cudaStreamWaitEvent(s, e, 0);
  if (err != cudaSuccess) return CudaStatus(err, "cudaStreamWaitEvent", name());
  return OkStatus();
}

StatusOr<bool> CudaDevice::QueryEvent(Event& event) {
  cudaEvent_t e = AsCuda(this, event);
  ZS_RETURN_IF_ERROR(MakeCurrent("cudaEventQuery"));
  cudaError_t err = cudaEventQuery(e);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) return false;
  return CudaStatus(err, "cudaEventQuery", name());
}

Status CudaDevice::SynchronizeEvent(Event& event) {
  cudaEvent_t e = AsCuda(this, event);
  ZS_RETURN_IF_ERROR(MakeCurrent("cudaEventSynchronize"));
  cudaError_t err = cudaEventSynchronize(e);
  if (err != cudaSuccess) return CudaStatus(err, "cudaEventSynchronize", name());
  return OkStatus();
}

Status CudaDevice::SynchronizeStream(Stream& stream) {
  cudaStream_t s = AsCuda(this, stream);
  ZS_RETURN_IF_ERROR(MakeCurrent("cudaStreamSynchronize"));
  cudaError_t err = cudaStreamSynchronize(s);
  if (err != cudaSuccess) return CudaStatus(err, "cudaStreamSynchronize", name());
  return OkStatus();
}

DeviceFactoryEntry CudaDeviceFactory() {
  return {"cuda", "cuda:<ordinal>",
          [](std::string_view arg, MemoryTracker& tracker) -> StatusOr<std::unique_ptr<Device>> {
            int ordinal = 0;
            if (!arg.empty()) {
              auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), ordinal);
              if (ec != std::errc() || end != arg.data() + arg.size() || ordinal < 0) {
                return InvalidArgumentError(fmt::format(
                    "device spec 'cuda:{}': the ordinal must be a non-negative integer", arg));
              }
            }
            ZS_ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device,
                                CudaDevice::Create(ordinal, tracker));
            return std::unique_ptr<Device>(std::move(device));
          }};
}

}  // namespace zs
