#include "offload/tile_copy_pipeline.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "runtime/base/check.h"

namespace zs {

StatusOr<std::unique_ptr<TileCopyPipeline>> TileCopyPipeline::Create(Device& device,
                                                                     int64_t max_bytes, PinMode pin,
                                                                     TraceRecorder* trace) {
  auto p = std::unique_ptr<TileCopyPipeline>(new TileCopyPipeline(device));
  p->trace_ = trace;
  if (trace != nullptr) {
    p->trace_track_[0] = trace->Track("copy d2h");
    p->trace_track_[1] = trace->Track("copy h2d");
  }
  if (max_bytes == 0) return p;  // nothing is ever copied: no buffers, no stream
  ZS_ASSIGN_OR_RETURN(
      p->staging_,
      PinnedBufferPool::Create(device, 4, size_t(std::max<int64_t>(max_bytes, 1)), pin,
                               MemoryCategory::kCommBuffers, "offload copy staging buffers"));
  ZS_ASSIGN_OR_RETURN(p->stream_, device.CreateStream());
  for (int i = 0; i < 2; ++i) {
    ZS_ASSIGN_OR_RETURN(p->grad_ready_[i], device.CreateEvent());
    ZS_ASSIGN_OR_RETURN(p->param_done_[i], device.CreateEvent());
  }
  return p;
}

TileCopyPipeline::~TileCopyPipeline() {
  if (stream_) device_.SynchronizeStream(*stream_).IgnoreError();
}

Status TileCopyPipeline::Begin(std::vector<TileCopy> tiles) {
  ZS_RETURN_IF_ERROR(broken_);
  ZS_CHECK(acquired_ < 0, "TileCopyPipeline::Begin with tile {} acquired", acquired_);
  ZS_RETURN_IF_ERROR(Finish());  // nothing of the last pass is still copying
  const int64_t capacity = staging_ ? int64_t(staging_->buffer_bytes()) : 0;
  for (const TileCopy& t : tiles) {
    ZS_CHECK(!t.grad_on_device || t.grad_bytes <= capacity,
             "tile gradient of {} bytes, staging holds {}", t.grad_bytes, capacity);
    ZS_CHECK(!t.param_on_device || t.param_bytes <= capacity,
             "tile parameters of {} bytes, staging holds {}", t.param_bytes, capacity);
  }
  tiles_ = std::move(tiles);
  grad_started_ = -1;
  next_ = 0;
  if (!tiles_.empty()) ZS_RETURN_IF_ERROR(StartGradCopy(0));
  return OkStatus();
}

Status TileCopyPipeline::StartGradCopy(int tile) {
  grad_started_ = tile;
  const TileCopy& t = tiles_[size_t(tile)];
  if (!t.grad_on_device || t.grad_bytes == 0) return OkStatus();
  Status s = QueueCopy(staging_->data(tile % 2), t.grad, t.grad_bytes, /*to_device=*/false);
  if (s.ok()) s = device_.RecordEvent(*grad_ready_[tile % 2], *stream_);
  if (!s.ok()) broken_ = s.WithContext("offload: copying a gradient tile to the host");
  stats_.device_to_host_bytes += t.grad_bytes;
  return broken_;
}

Status TileCopyPipeline::QueueCopy(void* dst, const void* src, int64_t bytes, bool to_device) {
  if (trace_ == nullptr) return device_.CopyAsync(dst, src, size_t(bytes), *stream_);
  // The stream runs the host functions in order with the copy: their clocks bracket it.
  auto begin = std::make_shared<TraceRecorder::Clock::time_point>();
  ZS_RETURN_IF_ERROR(
      device_.LaunchHostFunc(*stream_, [begin] { *begin = TraceRecorder::Clock::now(); }));
  ZS_RETURN_IF_ERROR(device_.CopyAsync(dst, src, size_t(bytes), *stream_));
  TraceRecorder* trace = trace_;
  const int track = trace_track_[to_device];
  return device_.LaunchHostFunc(*stream_, [trace, track, begin, bytes, to_device] {
    trace->Record(track, to_device ? "h2d" : "d2h", *begin, TraceRecorder::Clock::now(),
                  fmt::format(R"({{"bytes":{}}})", bytes));
  });
}

Status TileCopyPipeline::Wait(Event& event) {
  const auto start = std::chrono::steady_clock::now();
  Status s = device_.SynchronizeEvent(event);
  stats_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!s.ok() && broken_.ok()) broken_ = s.WithContext("offload: waiting for a copy");
  return broken_;
}

StatusOr<TileHostView> TileCopyPipeline::Acquire(int tile) {
  ZS_RETURN_IF_ERROR(broken_);
  ZS_CHECK(acquired_ < 0 && tile == next_ && tile < int(tiles_.size()),
           "TileCopyPipeline::Acquire({}): expected tile {} of {} (acquired: {})", tile, next_,
           tiles_.size(), acquired_);
  const TileCopy& t = tiles_[size_t(tile)];
  TileHostView view;
  if (t.grad_on_device && t.grad_bytes > 0) {
    ZS_RETURN_IF_ERROR(Wait(*grad_ready_[tile % 2]));
    view.grad = staging_->data(tile % 2);
  } else {
    view.grad = t.grad;
  }
  // The next tile's gradient goes into the other buffer, which tile - 1 no longer reads.
  if (tile + 1 < int(tiles_.size()) && grad_started_ < tile + 1) {
    ZS_RETURN_IF_ERROR(StartGradCopy(tile + 1));
  }
  if (t.param_on_device && t.param_bytes > 0) {
    ZS_RETURN_IF_ERROR(Wait(*param_done_[tile % 2]));  // tile - 2's copy out of this buffer
    view.param_out = staging_->data(2 + tile % 2);
  } else {
    view.param_out = t.param;
  }
  acquired_ = tile;
  return view;
}

Status TileCopyPipeline::Release(int tile) {
  ZS_CHECK(acquired_ == tile, "TileCopyPipeline::Release({}): tile {} is acquired", tile,
           acquired_);
  acquired_ = -1;
  ++next_;
  ZS_RETURN_IF_ERROR(broken_);
  const TileCopy& t = tiles_[size_t(tile)];
  if (!t.param_on_device || t.param_bytes == 0) return OkStatus();
  Status s = QueueCopy(t.param, staging_->data(2 + tile % 2), t.param_bytes, /*to_device=*/true);
  if (s.ok()) s = device_.RecordEvent(*param_done_[tile % 2], *stream_);
  if (!s.ok()) broken_ = s.WithContext("offload: copying updated parameters to the device");
  stats_.host_to_device_bytes += t.param_bytes;
  return broken_;
}

Status TileCopyPipeline::Finish() {
  ZS_CHECK(acquired_ < 0, "TileCopyPipeline::Finish with tile {} acquired", acquired_);
  if (!stream_) return broken_;
  const auto start = std::chrono::steady_clock::now();
  Status s = device_.SynchronizeStream(*stream_);
  stats_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!s.ok() && broken_.ok()) broken_ = s.WithContext("offload: finishing the copies");
  return broken_;
}

}  // namespace zs
