#include "runtime/sharding/bucket_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

namespace zs {

StatusOr<BucketPlan> BucketPlan::Create(const ShardLayout& layout, int64_t bucket_size_elements) {
  if (bucket_size_elements < 1) {
    return InvalidArgumentError(
        fmt::format("bucket plan: bucket size {} elements < 1", bucket_size_elements));
  }
  BucketPlan plan(layout);
  const int64_t world = layout.world_size();
  const int64_t align = layout.alignment();
  // world * align cannot overflow: layout.Create checked shard_size * world with
  // shard_size >= align whenever the unit is not empty; guard the empty case anyway.
  int64_t granule = 0;
  if (__builtin_mul_overflow(world, align, &granule)) granule = INT64_MAX;
  int64_t granules = bucket_size_elements / granule;
  plan.width_ = (granules < 1 ? 1 : granules) * align;
  const int64_t shard = layout.shard_size();
  for (int64_t hi = shard; hi > 0; hi -= plan.width_) {
    int64_t lo = hi > plan.width_ ? hi - plan.width_ : 0;
    plan.columns_.push_back({ShardOffset(lo), ShardOffset(hi)});
  }
  // Parameters are sorted in the unit (begins and ends never decrease), so each rank's piece
  // finds its first parameter by binary search: O(buckets * world * log params + output).
  std::vector<int64_t> ends(layout.num_params());
  for (int p = 0; p < layout.num_params(); ++p) ends[p] = layout.ParamRangeInUnit(p).end.value();
  plan.params_.resize(plan.columns_.size());
  for (int b = 0; b < plan.num_buckets(); ++b) {
    std::vector<int>& params = plan.params_[b];
    for (int r = 0; r < layout.world_size(); ++r) {
      UnitRange piece = plan.UnitRangeOf(b, r);
      auto first = std::upper_bound(ends.begin(), ends.end(), piece.begin.value());
      for (int p = static_cast<int>(first - ends.begin()); p < layout.num_params(); ++p) {
        UnitRange param = layout.ParamRangeInUnit(p);
        if (param.begin >= piece.end) break;
        if (!param.empty()) params.push_back(p);
      }
    }
    std::sort(params.begin(), params.end());
    params.erase(std::unique(params.begin(), params.end()), params.end());
  }
  return plan;
}

int64_t BucketPlan::BucketSize(int b) const {
  return ShardRangeOf(b).size() * layout_.world_size();
}

ShardRange BucketPlan::ShardRangeOf(int b) const {
  ZS_CHECK(b >= 0 && b < num_buckets(), "bucket {} out of [0, {})", b, num_buckets());
  return columns_[b];
}

BucketRange BucketPlan::SliceOf(int b, int rank) const {
  ZS_CHECK(rank >= 0 && rank < layout_.world_size(), "rank {} out of [0, {})", rank,
           layout_.world_size());
  int64_t width = ShardRangeOf(b).size();
  BucketOffset begin(width * rank);
  return {begin, begin + width};
}

UnitRange BucketPlan::UnitRangeOf(int b, int rank) const {
  ShardRange column = ShardRangeOf(b);
  UnitOffset begin = layout_.ShardRangeInUnit(rank).begin + column.begin.value();
  return {begin, begin + column.size()};
}

const std::vector<int>& BucketPlan::ParamsOf(int b) const {
  ZS_CHECK(b >= 0 && b < num_buckets(), "bucket {} out of [0, {})", b, num_buckets());
  return params_[b];
}

UnitOffset BucketPlan::ToUnit(int b, BucketOffset offset) const {
  ShardRange column = ShardRangeOf(b);
  int64_t width = column.size();
  ZS_CHECK(offset.value() >= 0 && offset.value() < width * layout_.world_size(),
           "{} outside bucket {} of {}", offset.ToString(), b, width * layout_.world_size());
  int rank = static_cast<int>(offset.value() / width);
  return layout_.ToUnit(column.begin + offset.value() % width, rank);
}

BucketPosition BucketPlan::ToBucket(UnitOffset offset) const {
  ShardPosition pos = layout_.ToShard(offset);
  // Bucket b covers shard offsets [shard - (b + 1) * width, shard - b * width), clipped at 0.
  int b = static_cast<int>((layout_.shard_size() - 1 - pos.offset.value()) / width_);
  ShardRange column = columns_[b];
  return {b, BucketOffset(pos.rank * column.size() + (pos.offset - column.begin))};
}

}  // namespace zs
