#include "runtime/reduce/gradient_reducer.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/base/check.h"

namespace zs {

StatusOr<std::unique_ptr<GradientReducer>> GradientReducer::Create(
    const std::vector<ShardLayout>& layouts, ReducerOptions options, Device& device,
    Communicator& comm) {
  if (options.max_inflight < 1) {
    return InvalidArgumentError(
        fmt::format("gradient reducer: max_inflight {} must be >= 1", options.max_inflight));
  }
  std::vector<BucketPlan> plans;
  plans.reserve(layouts.size());
  int64_t largest = 0;
  for (size_t u = 0; u < layouts.size(); ++u) {
    if (layouts[u].world_size() != comm.size()) {
      return InvalidArgumentError(
          fmt::format("gradient reducer: unit {} is laid out for {} ranks but group '{}' has {}", u,
                      layouts[u].world_size(), comm.group_name(), comm.size()));
    }
    ZS_ASSIGN_OR_RETURN(BucketPlan plan, BucketPlan::Create(layouts[u], options.bucket_elements));
    for (int b = 0; b < plan.num_buckets(); ++b) largest = std::max(largest, plan.BucketSize(b));
    plans.push_back(std::move(plan));
  }
  std::unique_ptr<GradientReducer> reducer(new GradientReducer(std::move(plans), options, comm));
  reducer->buffer_elements_ = largest;
  if (largest > 0) {
    for (int i = 0; i < options.max_inflight; ++i) {
      ZS_ASSIGN_OR_RETURN(DeviceBuffer buffer,
                          device.Allocate(size_t(largest) * DTypeSize(options.dtype), options.tier,
                                          MemoryCategory::kCommBuffers));
      reducer->buffers_.push_back(std::move(buffer));
      reducer->free_buffers_.push_back(i);
    }
  }
  return reducer;
}

GradientReducer::~GradientReducer() {
  // Buffers must not be freed under a running collective; errors were or will be reported by
  // the owner's Finish(), here they can only be dropped.
  for (InFlight& f : in_flight_) (void)f.handle.Wait();
}

void* GradientReducer::BufferData(int buffer) const { return buffers_[buffer].data(); }

Status GradientReducer::ReduceUnit(int unit, const float* grad, void* destination,
                                   bool accumulate) {
  ZS_CHECK(unit >= 0 && unit < int(plans_.size()), "unit {} out of range [0, {})", unit,
           plans_.size());
  const BucketPlan& plan = plans_[unit];
  const size_t elem = DTypeSize(options_.dtype);
  const int world = comm_.size();
  for (int b = 0; b < plan.num_buckets(); ++b) {
    if (free_buffers_.empty()) {
      ++stats_.buffer_waits;
      ZS_RETURN_IF_ERROR(CompleteOldest());
    }
    const int buffer = free_buffers_.back();
    free_buffers_.pop_back();
    auto* data = static_cast<char*>(BufferData(buffer));
    // Pack: rank r's column of the unit goes to BucketOffset r * width.
    for (int r = 0; r < world; ++r) {
      const UnitRange src = plan.UnitRangeOf(b, r);
      const BucketRange dst = plan.SliceOf(b, r);
      ConvertFromFloat(grad + src.begin.value(), data + dst.begin.value() * elem, options_.dtype,
                       size_t(src.size()));
    }
    const int64_t size = plan.BucketSize(b);
    CommHandle handle;
    if (options_.reduction == GradReduction::kAllReduce) {
      handle = comm_.StartAllReduce(data, data, size_t(size), options_.dtype, ReduceOp::kSum);
    } else {
      const int64_t width = size / world;
      handle = comm_.StartReduceScatter(data, data + comm_.rank() * width * elem, size_t(width),
                                        options_.dtype, ReduceOp::kSum);
    }
    ++stats_.buckets;
    stats_.elements += size;
    in_flight_.push_back(InFlight{std::move(handle), buffer, unit, b, destination, accumulate});
  }
  if (!options_.overlap) return CompleteAll();
  return OkStatus();
}

Status GradientReducer::CompleteOldest() {
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  Status status = f.handle.Wait();
  free_buffers_.push_back(f.buffer);
  ZS_RETURN_IF_ERROR(status);
  const BucketPlan& plan = plans_[f.unit];
  const size_t elem = DTypeSize(options_.dtype);
  const auto* data = static_cast<const char*>(BufferData(f.buffer));
  auto* dest = static_cast<char*>(f.destination);
  auto write = [&](const char* src, int64_t dst_offset, int64_t n) {
    if (f.accumulate) {
      AccumulateInto(dest + dst_offset * elem, src, options_.dtype, size_t(n));
    } else {
      std::copy(src, src + n * elem, dest + dst_offset * elem);
    }
  };
  if (options_.reduction == GradReduction::kAllReduce) {
    for (int r = 0; r < comm_.size(); ++r) {
      const UnitRange dst = plan.UnitRangeOf(f.bucket, r);
      const BucketRange src = plan.SliceOf(f.bucket, r);
      write(data + src.begin.value() * elem, dst.begin.value(), dst.size());
    }
  } else {
    const ShardRange dst = plan.ShardRangeOf(f.bucket);
    const BucketRange src = plan.SliceOf(f.bucket, comm_.rank());
    write(data + src.begin.value() * elem, dst.begin.value(), dst.size());
  }
  return OkStatus();
}

Status GradientReducer::CompleteAll() {
  Status first;
  while (!in_flight_.empty()) {
    Status s = CompleteOldest();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

Status GradientReducer::Finish() { return CompleteAll(); }

}  // namespace zs
