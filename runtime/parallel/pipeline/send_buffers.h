// SendBuffers: fp32 message buffers that a pipeline rank reuses, and the asynchronous sends that
// own some of them until delivered. The pipeline runner's activations and gradients and the tied
// embedding's weights and gradients both travel so: the compute thread starts a send and goes on;
// the buffer comes back to the pool once the send is known delivered.
//
// Contract
// - Acquire(n) returns a buffer of size n: a pooled one whose capacity suffices, else a new one.
//   Release gives a buffer back to the pool. Start(comm, buffer, peer, what) starts sending
//   the whole buffer and keeps it until delivered; `what` names the message in errors.
// - Reap() moves the buffers of delivered sends back to the pool, waiting for nothing; WaitAll()
//   waits for every send in flight (up to the communicator's timeout each). Both return the
//   first failed send's error with its `what`, and keep going (every buffer comes back). The
//   destructor waits for what is still in flight, so it can block up to the timeout when a peer
//   is gone.
// - Memory: every buffer this object allocated, whoever holds it now, is counted in `tracker`
//   (may be null) under (tier, category) until this object is destroyed: a pool grows to its
//   peak need and stays there. bytes() is that count.
// - Communicators must outlive the sends started on them. One thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/tracked_bytes.h"

namespace zs {

class SendBuffers {
 public:
  SendBuffers(MemoryTracker* tracker, MemoryTier tier, MemoryCategory category)
      : tracked_(tracker, tier, category) {}
  ~SendBuffers() { WaitAll().IgnoreError(); }
  SendBuffers(const SendBuffers&) = delete;
  SendBuffers& operator=(const SendBuffers&) = delete;

  std::vector<float> Acquire(int64_t elements);
  void Release(std::vector<float> buffer);
  void Start(Communicator& comm, std::vector<float> buffer, int peer, std::string what);
  Status Reap();
  Status WaitAll();

  int64_t bytes() const { return tracked_.current(); }
  int in_flight() const { return int(sends_.size()); }

 private:
  struct Send {
    CommHandle handle;
    std::vector<float> buffer;
    std::string what;
  };
  // Waits `send` (already complete, or to be waited) and pools its buffer.
  Status Complete(Send& send);

  TrackedBytes tracked_;
  std::vector<std::vector<float>> pool_;
  std::vector<Send> sends_;  // in start order
};

}  // namespace zs
