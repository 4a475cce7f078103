// BucketPlan: how one gather unit's gradients are cut into reduce-scatter buckets.
//
// Contract
// - A pure value computed from a ShardLayout and a bucket size in elements; no device, no
//   network, no threads. Copyable, immutable, safe to share between threads once built.
// - [Note: buckets are columns of the shards] A reduce-scatter over a buffer of B elements hands
//   rank r the reduced slice [r * B / world, (r + 1) * B / world). For that slice to land in
//   rank r's own shard, a bucket must take the same ShardRange [s0, s1) from every rank's shard:
//   in the unit frame it is world_size equal pieces r * shard_size + [s0, s1), which the bucket
//   buffer holds back to back in rank order (BucketOffset r * width + i). A single contiguous
//   UnitRange cannot have this property (it lies in one or two ranks' shards), so buckets here
//   tile the unit as columns; together they cover every unit element exactly once.
// - Order: gradients arrive in reverse parameter order during backward, so bucket 0 takes the
//   tail [shard_size - width, shard_size) of every shard, bucket 1 the columns before it, and so
//   on; the last bucket may be narrower. Because each bucket takes a column of every shard, it
//   generally holds parameters from all over the unit (ParamsOf lists them): a bucket is ready
//   only when all of those gradients are. Overlap inside one unit is therefore limited; the
//   reducer gets its overlap across units (one unit's buckets reduce while the previous unit's
//   backward runs), as in FSDP.
// - Widths: each bucket holds width * world_size elements with width a multiple of the layout's
//   alignment (every slice stays vector-aligned and the split is even). The requested size is
//   rounded down to a multiple of world_size * alignment, and up to one such granule when it is
//   smaller (a bucket cannot be smaller than one aligned element per rank).
// - Create() returns InvalidArgument naming the value for a bucket size < 1. Queries ZS_CHECK
//   their indices and offsets (a bad index is a caller bug).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/sharding/offsets.h"
#include "runtime/sharding/shard_layout.h"

namespace zs {

// A unit element seen from the bucket frame.
struct BucketPosition {
  int bucket = 0;
  BucketOffset offset;
  bool operator==(const BucketPosition&) const = default;
};

class BucketPlan {
 public:
  static StatusOr<BucketPlan> Create(const ShardLayout& layout, int64_t bucket_size_elements);

  const ShardLayout& layout() const { return layout_; }
  int num_buckets() const { return static_cast<int>(columns_.size()); }
  // Elements in bucket b's flat buffer (world_size * its width).
  int64_t BucketSize(int b) const;
  // The slice of every rank's shard that bucket b reduces into (the same on all ranks).
  ShardRange ShardRangeOf(int b) const;
  // Where rank r's slice sits in bucket b's buffer: [r * width, (r + 1) * width).
  BucketRange SliceOf(int b, int rank) const;
  // Rank r's piece of bucket b in the unit frame.
  UnitRange UnitRangeOf(int b, int rank) const;
  // Parameters with at least one element in bucket b, ascending: the bucket is complete once
  // all of their gradients have arrived.
  const std::vector<int>& ParamsOf(int b) const;

  // Frame conversions. Offsets must lie inside their frame (end excluded).
  UnitOffset ToUnit(int b, BucketOffset offset) const;
  BucketPosition ToBucket(UnitOffset offset) const;

 private:
  explicit BucketPlan(ShardLayout layout) : layout_(std::move(layout)) {}

  ShardLayout layout_;
  int64_t width_ = 0;               // the width of every bucket but possibly the last
  std::vector<ShardRange> columns_;  // bucket b's ShardRange
  std::vector<std::vector<int>> params_;
};

}  // namespace zs
