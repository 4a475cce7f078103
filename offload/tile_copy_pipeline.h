// TileCopyPipeline: the device<->host copies around a host-side optimizer step (ZeRO-Offload).
// Tile by tile: the reduced gradient comes to host memory before its tile is stepped, and the
// updated compute-dtype parameters go back to the device after, on a copy stream, so the
// copies of one tile overlap the step of the next.
//
// Contract
// - Begin(tiles) starts a pass over `tiles` in order. Each TileCopy names the tile's gradient
//   (`grad`, grad_bytes) and where its updated parameters belong (`param`, param_bytes), and
//   whether each is in device memory (copy) or already in host memory (used in place: stage 2/3
//   gradients that the reducer wrote to host memory, stage 3 parameters under offload_param).
// - Acquire(t) returns host pointers for tile t's gradient (to read) and parameter output (to
//   write); it blocks the host until t's gradient copy has finished and t's output buffer is no
//   longer being copied from. It also starts the gradient copy of tile t + 1. Tiles are acquired
//   in order, each once per pass, and released before the next is acquired.
// - Release(t) queues the copy of t's output to the device. Finish() blocks until every copy of
//   the pass has finished (call it before anything reads the device parameters).
// - Two staging buffers each way (a PinnedBufferPool: pinned when `pin`), so the host writes one
//   while the stream copies the other. The bytes moved each way are counted in stats().
// - Errors (a failed copy) are returned by the call that waits; the pipeline is then broken.
// - Threads: one thread (the rank's) calls everything; copies run on the device's stream.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "offload/pinned_buffer_pool.h"
#include "runtime/base/status.h"
#include "runtime/base/trace_recorder.h"
#include "runtime/device/device.h"

namespace zs {

struct TileCopy {
  const void* grad = nullptr;
  int64_t grad_bytes = 0;
  bool grad_on_device = false;
  void* param = nullptr;
  int64_t param_bytes = 0;
  bool param_on_device = false;
};

struct TileHostView {
  const void* grad = nullptr;  // tile's gradient in host memory
  void* param_out = nullptr;   // where the step writes the tile's updated parameters
};

struct TileCopyStats {
  int64_t device_to_host_bytes = 0;
  int64_t host_to_device_bytes = 0;
  double wait_seconds = 0.0;  // host time blocked waiting for copies
};

class TileCopyPipeline {
 public:
  // max_bytes: the largest grad_bytes or param_bytes of any tile that is copied; 0 when nothing
  // is (every tile's arrays are used in place): then no buffer or stream is created.
  // trace (not owned, may be null): each copy becomes a span on track "copy d2h" or "copy h2d",
  // timed on the stream itself (host functions around the copy).
  static StatusOr<std::unique_ptr<TileCopyPipeline>> Create(Device& device, int64_t max_bytes,
                                                            PinMode pin,
                                                            TraceRecorder* trace = nullptr);
  ~TileCopyPipeline();

  Status Begin(std::vector<TileCopy> tiles);
  StatusOr<TileHostView> Acquire(int tile);
  Status Release(int tile);
  Status Finish();

  const TileCopyStats& stats() const { return stats_; }

 private:
  TileCopyPipeline(Device& device) : device_(device) {}
  Status StartGradCopy(int tile);
  // Queues the copy (bracketed by trace spans when tracing).
  Status QueueCopy(void* dst, const void* src, int64_t bytes, bool to_device);
  Status Wait(Event& event);

  Device& device_;
  std::unique_ptr<PinnedBufferPool> staging_;  // 0, 1: gradients in; 2, 3: parameters out
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Event> grad_ready_[2];  // the gradient copy into buffer i finished
  std::unique_ptr<Event> param_done_[2];  // the parameter copy out of buffer 2 + i finished
  std::vector<TileCopy> tiles_;
  int grad_started_ = -1;  // the last tile whose gradient copy was queued
  int acquired_ = -1;      // the tile acquired now, or -1
  int next_ = 0;           // the next tile to acquire
  TileCopyStats stats_;
  Status broken_;
  TraceRecorder* trace_ = nullptr;
  int trace_track_[2] = {-1, -1};  // [to_device]
};

}  // namespace zs
