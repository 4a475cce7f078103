#include "runtime/base/dtype.h"

#include <algorithm>

#include <fmt/format.h>

namespace zs {

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
  }
  return "?";
}

StatusOr<DType> ParseDType(std::string_view name) {
  if (name == "f32" || name == "fp32" || name == "float32") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "f16" || name == "fp16" || name == "float16") return DType::kF16;
  return InvalidArgumentError(
      fmt::format("unknown dtype '{}' (allowed: f32, bf16, f16)", name));
}

float F16ToFloat(Float16 h) {
  uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t man = h.bits & 0x3ffu;
  uint32_t out;
  if (exp == 0x1f) {
    out = sign | 0x7f800000u | (man << 13);  // inf or NaN
  } else if (exp != 0) {
    out = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    out = sign;
  } else {
    // Subnormal: value = man * 2^-24. Exact in float.
    float v = float(man) * 0x1p-24f;
    out = sign | std::bit_cast<uint32_t>(v);
  }
  return std::bit_cast<float>(out);
}

Float16 FloatToF16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return Float16{uint16_t(sign | 0x7e00u)};  // NaN
  if (abs >= 0x477ff000u) return Float16{uint16_t(sign | 0x7c00u)};  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in f16: round abs * 2^24 to an integer, ties to even.
    // Float arithmetic does the rounding exactly: adding 0.5 (2^-1) in a float whose ulp is 1.
    float v = std::bit_cast<float>(abs) * 0x1p24f;  // exact: a power-of-two scale
    // v < 1024. Round to nearest even integer using the 2^23 trick.
    float r = (v + 0x1p23f) - 0x1p23f;
    return Float16{uint16_t(sign | uint16_t(r))};
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits.
  uint32_t rounding = 0xfffu + ((abs >> 13) & 1u);
  uint32_t h = (abs - (112u << 23) + rounding) >> 13;
  return Float16{uint16_t(sign | h)};
}

void ConvertFromFloat(const float* src, void* dst, DType dst_type, size_t n) {
  switch (dst_type) {
    case DType::kF32:
      std::copy(src, src + n, static_cast<float*>(dst));
      return;
    case DType::kBF16: {
      auto* out = static_cast<BFloat16*>(dst);
      for (size_t i = 0; i < n; ++i) out[i] = FloatToBF16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* out = static_cast<Float16*>(dst);
      for (size_t i = 0; i < n; ++i) out[i] = FloatToF16(src[i]);
      return;
    }
  }
}

void ConvertToFloat(const void* src, DType src_type, float* dst, size_t n) {
  switch (src_type) {
    case DType::kF32: {
      const auto* in = static_cast<const float*>(src);
      std::copy(in, in + n, dst);
      return;
    }
    case DType::kBF16: {
      const auto* in = static_cast<const BFloat16*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = BF16ToFloat(in[i]);
      return;
    }
    case DType::kF16: {
      const auto* in = static_cast<const Float16*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = F16ToFloat(in[i]);
      return;
    }
  }
}

void AccumulateInto(void* dst, const void* src, DType t, size_t n) {
  switch (t) {
    case DType::kF32: {
      auto* out = static_cast<float*>(dst);
      const auto* in = static_cast<const float*>(src);
      for (size_t i = 0; i < n; ++i) out[i] += in[i];
      return;
    }
    case DType::kBF16: {
      auto* out = static_cast<BFloat16*>(dst);
      const auto* in = static_cast<const BFloat16*>(src);
      for (size_t i = 0; i < n; ++i) out[i] = FloatToBF16(BF16ToFloat(out[i]) + BF16ToFloat(in[i]));
      return;
    }
    case DType::kF16: {
      auto* out = static_cast<Float16*>(dst);
      const auto* in = static_cast<const Float16*>(src);
      for (size_t i = 0; i < n; ++i) out[i] = FloatToF16(F16ToFloat(out[i]) + F16ToFloat(in[i]));
      return;
    }
  }
}

}  // namespace zs
