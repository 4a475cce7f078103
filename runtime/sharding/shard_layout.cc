#include "runtime/sharding/shard_layout.h"

#include <fmt/format.h>

namespace zs {
namespace {

// a rounded up to a multiple of m (m > 0), or false on overflow.
bool RoundUp(int64_t a, int64_t m, int64_t* out) {
  int64_t r = a % m;
  if (r == 0) {
    *out = a;
    return true;
  }
  return !__builtin_add_overflow(a, m - r, out);
}

}  // namespace

StatusOr<ShardLayout> ShardLayout::Create(std::span<const int64_t> param_sizes, int world_size,
                                          int64_t alignment, ParamStart start) {
  if (world_size < 1) {
    return InvalidArgumentError(fmt::format("shard layout: world_size {} < 1", world_size));
  }
  if (alignment < 1 || (alignment & (alignment - 1)) != 0) {
    return InvalidArgumentError(
        fmt::format("shard layout: alignment {} is not a power of two", alignment));
  }
  ShardLayout layout;
  layout.world_size_ = world_size;
  layout.alignment_ = alignment;
  layout.params_.reserve(param_sizes.size());
  int64_t cursor = 0;
  for (size_t p = 0; p < param_sizes.size(); ++p) {
    int64_t size = param_sizes[p];
    if (size < 0) {
      return InvalidArgumentError(
          fmt::format("shard layout: parameter {} has negative size {}", p, size));
    }
    int64_t begin = cursor;
    int64_t end = 0;
    if ((start == ParamStart::kAligned && !RoundUp(cursor, alignment, &begin)) ||
        __builtin_add_overflow(begin, size, &end)) {
      return InvalidArgumentError(fmt::format(
          "shard layout: parameter {} of size {} at unit offset {} overflows int64", p, size,
          cursor));
    }
    layout.params_.push_back({UnitOffset(begin), UnitOffset(end)});
    cursor = end;
  }
  layout.unit_size_ = cursor;
  // Ceil-divide first so that shard_size * world_size only overflows when the result would.
  int64_t per_rank = cursor / world_size + (cursor % world_size != 0 ? 1 : 0);
  int64_t shard = 0;
  int64_t padded = 0;
  if (!RoundUp(per_rank, alignment, &shard) || __builtin_mul_overflow(shard, world_size, &padded)) {
    return InvalidArgumentError(fmt::format(
        "shard layout: unit of {} elements padded to {} ranks x alignment {} overflows int64",
        cursor, world_size, alignment));
  }
  layout.shard_size_ = shard;
  return layout;
}

UnitRange ShardLayout::ParamRangeInUnit(int p) const {
  ZS_CHECK(p >= 0 && p < num_params(), "parameter {} out of [0, {})", p, num_params());
  return params_[p];
}

int64_t ShardLayout::ParamSize(int p) const { return ParamRangeInUnit(p).size(); }

UnitRange ShardLayout::ShardRangeInUnit(int rank) const {
  ZS_CHECK(rank >= 0 && rank < world_size_, "rank {} out of [0, {})", rank, world_size_);
  UnitOffset begin(shard_size_ * rank);
  return {begin, begin + shard_size_};
}

OwnedPart ShardLayout::OwnedBy(int p, int rank) const {
  UnitRange param = ParamRangeInUnit(p);
  UnitRange shard = ShardRangeInUnit(rank);
  UnitRange both = param.Intersect(shard);
  if (both.empty()) return {};
  return {{ParamOffset(both.begin - param.begin), ParamOffset(both.end - param.begin)},
          {ShardOffset(both.begin - shard.begin), ShardOffset(both.end - shard.begin)}};
}

UnitOffset ShardLayout::ToUnit(int p, ParamOffset offset) const {
  UnitRange param = ParamRangeInUnit(p);
  ZS_CHECK(offset.value() >= 0 && offset.value() < param.size(), "{} outside parameter {} of {}",
           offset.ToString(), p, param.size());
  return param.begin + offset.value();
}

UnitOffset ShardLayout::ToUnit(ShardOffset offset, int rank) const {
  UnitRange shard = ShardRangeInUnit(rank);
  ZS_CHECK(offset.value() >= 0 && offset.value() < shard_size_, "{} outside shard of {}",
           offset.ToString(), shard_size_);
  return shard.begin + offset.value();
}

ShardPosition ShardLayout::ToShard(UnitOffset offset) const {
  ZS_CHECK(offset.value() >= 0 && offset.value() < padded_size(), "{} outside padded unit of {}",
           offset.ToString(), padded_size());
  return {static_cast<int>(offset.value() / shard_size_),
          ShardOffset(offset.value() % shard_size_)};
}

}  // namespace zs
