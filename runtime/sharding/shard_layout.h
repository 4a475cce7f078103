// ShardLayout: which rank owns which elements of one gather unit (ZeRO-3's flat parameter).
//
// Contract
// - A pure value computed once from the unit's parameter sizes (element counts), the world size
//   and an alignment in elements; no device, no network, no threads. Copyable, immutable, safe
//   to share between threads once built.
// - Layout: parameters are packed in order into one flat unit buffer (each start rounded up to
//   the alignment when ParamStart::kAligned), then padded at the end so that
//   padded_size == world_size * shard_size with shard_size a multiple of the alignment (so every
//   shard stays vector-aligned). Rank r owns UnitOffset [r * shard_size, (r + 1) * shard_size).
//   Padding is never inside a parameter; with kAligned there are also gaps between parameters.
// - Parameters of size 0 are allowed (an empty UnitRange at their position); so is a unit with
//   no parameters or only empty ones (shard_size is then 0).
// - Create() returns InvalidArgument naming the value for world_size < 1, a non-power-of-two
//   alignment, a negative size, or a total that overflows int64.
// - Query methods ZS_CHECK their indices (a bad rank or parameter index is a caller bug).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/sharding/offsets.h"

namespace zs {

enum class ParamStart {
  kPacked,   // each parameter starts right after the previous one
  kAligned,  // each parameter starts at a multiple of the alignment
};

// The part of one parameter that one rank owns: the same elements seen from two frames.
// Both ranges are empty (and of size 0) when the rank owns none of the parameter.
struct OwnedPart {
  ParamRange param;
  ShardRange shard;
  bool empty() const { return param.empty(); }
  bool operator==(const OwnedPart&) const = default;
};

// A unit element seen from the shard frame: which rank holds it, and where in that rank's shard.
struct ShardPosition {
  int rank = 0;
  ShardOffset offset;
  bool operator==(const ShardPosition&) const = default;
};

class ShardLayout {
 public:
  static StatusOr<ShardLayout> Create(std::span<const int64_t> param_sizes, int world_size,
                                      int64_t alignment, ParamStart start = ParamStart::kPacked);

  int world_size() const { return world_size_; }
  int64_t alignment() const { return alignment_; }
  int num_params() const { return static_cast<int>(params_.size()); }

  // Elements holding parameters, from the first to the end of the last (gaps included).
  int64_t unit_size() const { return unit_size_; }
  // unit_size rounded up so that every rank gets an equal, aligned shard.
  int64_t padded_size() const { return shard_size_ * world_size_; }
  int64_t shard_size() const { return shard_size_; }

  // Where parameter p lives in the unit buffer.
  UnitRange ParamRangeInUnit(int p) const;
  int64_t ParamSize(int p) const;
  // The unit elements rank r owns.
  UnitRange ShardRangeInUnit(int rank) const;
  // The part of parameter p that rank r owns (possibly empty; a parameter may span ranks).
  OwnedPart OwnedBy(int p, int rank) const;

  // Frame conversions. Offsets must lie inside their frame (end excluded).
  UnitOffset ToUnit(int p, ParamOffset offset) const;
  UnitOffset ToUnit(ShardOffset offset, int rank) const;
  ShardPosition ToShard(UnitOffset offset) const;

 private:
  ShardLayout() = default;

  int world_size_ = 1;
  int64_t alignment_ = 1;
  int64_t unit_size_ = 0;
  int64_t shard_size_ = 0;
  std::vector<UnitRange> params_;
};

}  // namespace zs
