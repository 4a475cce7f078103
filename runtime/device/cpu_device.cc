#include "runtime/device/cpu_device.h"

#include <fmt/format.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

namespace zs {
namespace {

// The progress of one stream, shared by the stream, its worker and the events recorded on it
// (so an event may outlive its stream).
struct StreamProgress {
  std::mutex mu;
  std::condition_variable done_cv;  // signalled when `completed` grows or the worker exits
  uint64_t completed = 0;           // guarded by mu: items finished, in queue order
  bool exited = false;              // guarded by mu: the worker ran everything and stopped

  void WaitFor(uint64_t seq) {
    std::unique_lock<std::mutex> lock(mu);
    done_cv.wait(lock, [&] { return completed >= seq || exited; });
  }
  bool Reached(uint64_t seq) {
    std::lock_guard<std::mutex> lock(mu);
    return completed >= seq || exited;
  }
};

class CpuStream final : public Stream {
 public:
  explicit CpuStream(const Device* device)
      : Stream(device), progress_(std::make_shared<StreamProgress>()), worker_([this] { Run(); }) {}

  ~CpuStream() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    work_cv_.notify_one();
    worker_.join();
  }

  // Queues fn; returns its 1-based position in the stream.
  uint64_t Enqueue(std::function<void()> fn) {
    uint64_t seq;
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back(std::move(fn));
      seq = ++enqueued_;
    }
    work_cv_.notify_one();
    return seq;
  }

  // How many items have been queued so far: an event recorded now completes at this count.
  uint64_t End() {
    std::lock_guard<std::mutex> lock(mu_);
    return enqueued_;
  }

  const std::shared_ptr<StreamProgress>& progress() const { return progress_; }

 private:
  void Run() {
    while (true) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stopping_ || !items_.empty(); });
        if (items_.empty()) break;  // stopping and drained
        fn = std::move(items_.front());
        items_.pop_front();
      }
      fn();
      {
        std::lock_guard<std::mutex> lock(progress_->mu);
        ++progress_->completed;
      }
      progress_->done_cv.notify_all();
    }
    {
      std::lock_guard<std::mutex> lock(progress_->mu);
      progress_->exited = true;
    }
    progress_->done_cv.notify_all();
  }

  const std::shared_ptr<StreamProgress> progress_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::deque<std::function<void()>> items_;  // guarded by mu_
  uint64_t enqueued_ = 0;                    // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::thread worker_;                       // last: starts once the members above exist
};

class CpuEvent final : public Event {
 public:
  explicit CpuEvent(const Device* device) : Event(device) {}

  struct Mark {
    std::shared_ptr<StreamProgress> progress;  // null: never recorded (complete)
    uint64_t seq = 0;
    void Wait() const {
      if (progress) progress->WaitFor(seq);
    }
    bool Reached() const { return !progress || progress->Reached(seq); }
  };

  void Set(Mark mark) {
    std::lock_guard<std::mutex> lock(mu_);
    mark_ = std::move(mark);
  }
  Mark Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return mark_;
  }

 private:
  mutable std::mutex mu_;
  Mark mark_;  // guarded by mu_
};

CpuStream& AsCpu(const Device* device, Stream& stream) {
  ZS_CHECK(&stream.device() == device, "a stream of {} used on {}", stream.device().name(),
           device->name());
  return static_cast<CpuStream&>(stream);
}

CpuEvent& AsCpu(const Device* device, Event& event) {
  ZS_CHECK(&event.device() == device, "an event of {} used on {}", event.device().name(),
           device->name());
  return static_cast<CpuEvent&>(event);
}

size_t RoundUp(size_t bytes, size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace

CpuDevice::CpuDevice(std::string name, MemoryTracker& tracker)
    : Device(std::move(name), DeviceKind::kCpu, tracker) {}

bool CpuDevice::Supports(MemoryTier tier) const { return tier != MemoryTier::kNvme; }

size_t CpuDevice::Alignment(MemoryTier tier) const {
  return tier == MemoryTier::kDevice ? 256 : kHostAlignment;
}

StatusOr<void*> CpuDevice::AllocateRaw(size_t bytes, MemoryTier tier, MemoryCategory category) {
  const size_t alignment = Alignment(tier);
  void* ptr = std::aligned_alloc(alignment, RoundUp(bytes, alignment));
  if (ptr == nullptr) {
    return OutOfMemoryError(
        fmt::format("out of {} memory: {}: aligned_alloc({}, {}) failed; {}", MemoryTierName(tier),
                    DescribeRequest(bytes, tier, category), alignment, RoundUp(bytes, alignment),
                    tracker().Snapshot().InUseSummary(tier)));
  }
  return ptr;
}

void CpuDevice::FreeRaw(void* ptr, size_t bytes, MemoryTier tier, MemoryCategory category) {
  std::free(ptr);
}

StatusOr<std::unique_ptr<Stream>> CpuDevice::CreateStream() {
  return std::unique_ptr<Stream>(std::make_unique<CpuStream>(this));
}

StatusOr<std::unique_ptr<Event>> CpuDevice::CreateEvent() {
  return std::unique_ptr<Event>(std::make_unique<CpuEvent>(this));
}

Status CpuDevice::CopyAsync(void* dst, const void* src, size_t bytes, Stream& stream) {
  CpuStream& s = AsCpu(this, stream);
  ZS_RETURN_IF_ERROR(CheckCopyArgs("CopyAsync", dst, src, bytes));
  if (bytes == 0) return OkStatus();
  s.Enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); });
  return OkStatus();
}

Status CpuDevice::MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) {
  CpuStream& s = AsCpu(this, stream);
  ZS_RETURN_IF_ERROR(CheckCopyArgs("MemsetAsync", dst, nullptr, bytes));
  if (bytes == 0) return OkStatus();
  s.Enqueue([dst, value, bytes] { std::memset(dst, value, bytes); });
  return OkStatus();
}

Status CpuDevice::LaunchHostFunc(Stream& stream, std::function<void()> fn) {
  CpuStream& s = AsCpu(this, stream);
  if (!fn) return InvalidArgumentError(fmt::format("LaunchHostFunc on {}: empty function", name()));
  s.Enqueue(std::move(fn));
  return OkStatus();
}

Status CpuDevice::RecordEvent(Event& event, Stream& stream) {
  CpuStream& s = AsCpu(this, stream);
  AsCpu(this, event).Set(CpuEvent::Mark{s.progress(), s.End()});
  return OkStatus();
}

Status CpuDevice::StreamWaitEvent(Stream& stream, Event& event) {
  CpuStream& s = AsCpu(this, stream);
  CpuEvent::Mark mark = AsCpu(this, event).Get();
  if (mark.Reached()) return OkStatus();  // nothing to wait for
  // Only the worker of `s` blocks here. Marks capture work queued before this call, so waits
  // never form a cycle between streams.
  s.Enqueue([mark = std::move(mark)] { mark.Wait(); });
  return OkStatus();
}

StatusOr<bool> CpuDevice::QueryEvent(Event& event) { return AsCpu(this, event).Get().Reached(); }

Status CpuDevice::SynchronizeEvent(Event& event) {
  AsCpu(this, event).Get().Wait();
  return OkStatus();
}

Status CpuDevice::SynchronizeStream(Stream& stream) {
  CpuStream& s = AsCpu(this, stream);
  s.progress()->WaitFor(s.End());
  return OkStatus();
}

}  // namespace zs
