// DType: the element types zerostack stores and communicates (f32, bf16, f16), and exact
// scalar conversions between them.
//
// Contract
// - Conversions to bf16/f16 round to nearest, ties to even; NaN stays NaN (quiet), overflow
//   goes to infinity, f16 subnormals are produced and read exactly.
// - Pure functions, no state: callable from any thread, including inside kernels' CPU
//   references.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/base/status.h"

namespace zs {

enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

inline constexpr size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }
std::string_view DTypeName(DType t);                  // "f32", "bf16", "f16"
StatusOr<DType> ParseDType(std::string_view name);    // accepts the names above

// Storage types: a 16-bit pattern, no arithmetic. Convert to float to compute.
struct BFloat16 {
  uint16_t bits = 0;
};
struct Float16 {
  uint16_t bits = 0;
};

inline float BF16ToFloat(BFloat16 h) { return std::bit_cast<float>(uint32_t{h.bits} << 16); }

inline BFloat16 FloatToBF16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return BFloat16{uint16_t((u + rounding) >> 16)};
}

float F16ToFloat(Float16 h);
Float16 FloatToF16(float f);

// Reads element i of a buffer of type t as float.
inline float LoadAsFloat(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kBF16: return BF16ToFloat(static_cast<const BFloat16*>(data)[i]);
    case DType::kF16: return F16ToFloat(static_cast<const Float16*>(data)[i]);
  }
  return 0.f;
}

// Writes element i of a buffer of type t from a float (rounding to nearest even).
inline void StoreFromFloat(void* data, DType t, size_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(data)[i] = v; return;
    case DType::kBF16: static_cast<BFloat16*>(data)[i] = FloatToBF16(v); return;
    case DType::kF16: static_cast<Float16*>(data)[i] = FloatToF16(v); return;
  }
}

// Bulk forms of the two above, with the dtype switch outside the loop. Rounding is to nearest
// even, as in StoreFromFloat.
void ConvertFromFloat(const float* src, void* dst, DType dst_type, size_t n);
void ConvertToFloat(const void* src, DType src_type, float* dst, size_t n);
// dst[i] = dst[i] + src[i], both of type t, summed in f32 and rounded once.
void AccumulateInto(void* dst, const void* src, DType t, size_t n);

}  // namespace zs
