// Typed element offsets: every offset carries its coordinate frame in its type.
//
// Contract
// - Frames (STYLE.md rule 4, after Megatron-Core's param_layout.py):
//     ParamOffset  - element within one parameter (0 .. numel of that parameter)
//     UnitOffset   - element within a gather unit's flat, padded buffer (the "world" buffer:
//                    every parameter of the unit, packed, plus padding at the end)
//     ShardOffset  - element within one rank's shard of a unit (0 .. shard_size)
//     BucketOffset - element within one gradient bucket's flat reduce-scatter buffer
// - An Offset<F> only mixes with offsets of the same frame: adding a count gives the same frame,
//   subtracting two offsets of one frame gives a count. Moving between frames goes through the
//   named functions of ShardLayout / BucketPlan, never through .value() arithmetic in callers.
// - Pure values: no allocation, no threads, safe to copy anywhere.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace zs {

struct ParamFrame {
  static constexpr const char* kName = "param";
};
struct UnitFrame {
  static constexpr const char* kName = "unit";
};
struct ShardFrame {
  static constexpr const char* kName = "shard";
};
struct BucketFrame {
  static constexpr const char* kName = "bucket";
};

// An element index in frame F (counted in elements, not bytes).
template <typename F>
class Offset {
 public:
  constexpr Offset() = default;
  constexpr explicit Offset(int64_t value) : value_(value) {}

  constexpr int64_t value() const { return value_; }

  constexpr Offset operator+(int64_t count) const { return Offset(value_ + count); }
  constexpr Offset operator-(int64_t count) const { return Offset(value_ - count); }
  constexpr int64_t operator-(Offset other) const { return value_ - other.value_; }
  constexpr auto operator<=>(const Offset&) const = default;

  std::string ToString() const { return fmt::format("{}:{}", F::kName, value_); }

 private:
  int64_t value_ = 0;
};

using ParamOffset = Offset<ParamFrame>;
using UnitOffset = Offset<UnitFrame>;
using ShardOffset = Offset<ShardFrame>;
using BucketOffset = Offset<BucketFrame>;

// The half-open range [begin, end) of elements in frame F.
template <typename F>
struct ElementRange {
  Offset<F> begin;
  Offset<F> end;

  constexpr int64_t size() const { return end - begin; }
  constexpr bool empty() const { return end <= begin; }
  constexpr bool Contains(Offset<F> x) const { return begin <= x && x < end; }
  constexpr bool operator==(const ElementRange&) const = default;

  // The overlap of two ranges; an empty range (begin == end) when they do not meet.
  constexpr ElementRange Intersect(const ElementRange& other) const {
    Offset<F> b = begin < other.begin ? other.begin : begin;
    Offset<F> e = end < other.end ? end : other.end;
    if (e < b) e = b;
    return {b, e};
  }

  std::string ToString() const {
    return fmt::format("{}[{}, {})", F::kName, begin.value(), end.value());
  }
};

using ParamRange = ElementRange<ParamFrame>;
using UnitRange = ElementRange<UnitFrame>;
using ShardRange = ElementRange<ShardFrame>;
using BucketRange = ElementRange<BucketFrame>;

}  // namespace zs
