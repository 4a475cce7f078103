// GradientReducer: reduces each unit's gradient across the data-parallel group bucket by
// bucket, as backward completes units, so communication overlaps the rest of backward.
//
// Contract
// - Built from one ShardLayout per unit and a bucket size; each unit gets a BucketPlan
//   (runtime/sharding/bucket_plan.h: a bucket is the same column [s0, s1) of every rank's
//   shard). Holds `max_inflight` bucket buffers of the largest bucket, in the comm dtype
//   (MemoryCategory::kCommBuffers); nothing else is allocated after Create.
// - ReduceUnit(u, grad, destination, accumulate): `grad` is unit u's complete local gradient
//   in fp32, in the unit frame (padded_size elements, zero in padding). For every bucket it
//   waits for a free buffer (finishing the oldest bucket in flight if needed), packs the
//   bucket's columns converted to the comm dtype, and starts the bucket's collective:
//     kAllReduce      all-reduce (sum) of the whole bucket; at completion every rank writes
//                     every column into `destination` = the full unit gradient (padded_size
//                     elements of the comm dtype).
//     kReduceScatter  reduce-scatter (sum); at completion this rank writes its own column into
//                     `destination` = its gradient shard (shard_size elements).
//   With `accumulate` the result is added (in f32, rounded once) instead of stored: gradient
//   accumulation over micro-batches happens on reduced gradients, so stages 0-3 add the same
//   numbers in the same order. [Note: one summation order] Each element is summed over ranks in
//   rank order by the Communicator whatever the bucket, and an all-reduce gives the same bits as
//   a reduce-scatter, so the four stages produce bit-identical gradients.
//   `grad` may be reused as soon as ReduceUnit returns; `destination` must stay valid and
//   untouched until Finish(). With overlap off, ReduceUnit finishes its buckets before returning.
// - Finish() waits for every bucket in flight and writes its result; call it before reading
//   any destination (the optimizer step).
// - Errors: a failed collective is returned by the call that waits for it (the communicator is
//   then broken); buckets still in flight are waited for before the error is returned.
// - Threads: one thread (the rank's compute thread) calls it; collectives progress on the
//   communicator's threads. The communicator should be one that only the reducer uses, so a
//   bucket is never queued behind a parameter all-gather.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "runtime/base/dtype.h"
#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/device.h"
#include "runtime/sharding/bucket_plan.h"
#include "runtime/sharding/shard_layout.h"

namespace zs {

enum class GradReduction { kAllReduce, kReduceScatter };

struct ReducerOptions {
  DType dtype = DType::kF32;  // communication and destination dtype
  GradReduction reduction = GradReduction::kReduceScatter;
  int64_t bucket_elements = 500'000'000;  // reduce_bucket_size
  int max_inflight = 2;                   // bucket buffers held, >= 1
  bool overlap = true;                    // overlap_comm
  MemoryTier tier = MemoryTier::kHost;
};

struct ReducerStats {
  int64_t buckets = 0;       // collectives started
  int64_t buffer_waits = 0;  // times a bucket had to wait for a free buffer
  int64_t elements = 0;      // elements sent into collectives (bucket sizes summed)
};

class GradientReducer {
 public:
  static StatusOr<std::unique_ptr<GradientReducer>> Create(const std::vector<ShardLayout>& layouts,
                                                           ReducerOptions options, Device& device,
                                                           Communicator& comm);
  ~GradientReducer();

  Status ReduceUnit(int unit, const float* grad, void* destination, bool accumulate);
  Status Finish();

  const BucketPlan& plan(int unit) const { return plans_[unit]; }
  const ReducerStats& stats() const { return stats_; }
  int64_t buffer_elements() const { return buffer_elements_; }

 private:
  struct InFlight {
    CommHandle handle;
    int buffer = 0;
    int unit = 0;
    int bucket = 0;
    void* destination = nullptr;
    bool accumulate = false;
  };

  GradientReducer(std::vector<BucketPlan> plans, ReducerOptions options, Communicator& comm)
      : plans_(std::move(plans)), options_(options), comm_(comm) {}

  // Waits for the oldest bucket in flight and writes its result; frees its buffer.
  Status CompleteOldest();
  Status CompleteAll();
  void* BufferData(int buffer) const;

  std::vector<BucketPlan> plans_;
  ReducerOptions options_;
  Communicator& comm_;
  int64_t buffer_elements_ = 0;
  std::vector<DeviceBuffer> buffers_;
  std::vector<int> free_buffers_;
  std::deque<InFlight> in_flight_;
  ReducerStats stats_;
};

}  // namespace zs
