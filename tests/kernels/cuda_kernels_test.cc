// The CUDA kernels of kernels/cuda against their CPU references, bit for bit, on random
// non-zero data of sizes that are not multiples of any block or vector width. Every test skips
// (GTEST_SKIP) when there is no CUDA device, e.g. on build machines without a driver.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_reference.h"
#include "tests/kernels/cuda_test_support.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/grad_norm.h"

namespace zs::kernels {
namespace {

// A device copy of a host vector that frees itself.
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(size_t n) : n_(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(1, n) * sizeof(T)) !=
        cudaSuccess)
      ptr_ = nullptr;
  }
  explicit DeviceVector(const std::vector<T>& host) : DeviceVector(host.size()) {
    if (ptr_ != nullptr && !host.empty()) {
      cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
    }
  }
  ~DeviceVector() { cudaFree(ptr_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;

  T* get() const { return ptr_; }
  std::vector<T> ToHost() const {
    std::vector<T> out(n_);
    if (n_ > 0) cudaMemcpy(out.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return out;
  }

 private:
  size_t n_;
  T* ptr_ = nullptr;
};

const std::vector<size_t> kSizes = {1, 3, 31, 255, 257, 1000, 4097, 65537, (1u << 20) + 5};

// Random f32 bit patterns, zero excluded: every exponent, NaNs and infinities included.
std::vector<float> RandomBits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) {
    uint32_t u;
    do u = rng();
    while ((u & 0x7fffffffu) == 0);
    x = std::bit_cast<float>(u);
  }
  return v;
}

// Random finite non-zero values of moderate magnitude (|x| in [2^-20, 2^10)).
std::vector<float> RandomFinite(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(1.f, 2.f);
  std::uniform_int_distribution<int> expo(-20, 9);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(mant(rng), expo(rng)) * ((rng() & 1) ? 1.f : -1.f);
  return v;
}

std::vector<uint16_t> ToHalfBits(const std::vector<float>& v, bool bf16) {
  std::vector<uint16_t> out(v.size());
  if (bf16) {
    CastF32ToBF16Reference(v.data(), out.data(), v.size());
  } else {
    CastF32ToF16Reference(v.data(), out.data(), v.size());
  }
  return out;
}

std::vector<uint32_t> AsBits(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

TEST(CudaKernelsTest, CastsFromF32MatchReference) {
  ZS_SKIP_WITHOUT_GPU();
  for (size_t n : kSizes) {
    const std::vector<float> in = RandomBits(n, uint32_t(n));
    DeviceVector<float> d_in(in);
    DeviceVector<uint16_t> d_bf(n), d_hf(n);
    ZS_CUDA_OK(LaunchCastF32ToBF16(d_in.get(), d_bf.get(), n, nullptr));
    ZS_CUDA_OK(LaunchCastF32ToF16(d_in.get(), d_hf.get(), n, nullptr));
    ZS_CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> bf(n), hf(n);
    CastF32ToBF16Reference(in.data(), bf.data(), n);
    CastF32ToF16Reference(in.data(), hf.data(), n);
    EXPECT_EQ(d_bf.ToHost(), bf) << "n=" << n;
    EXPECT_EQ(d_hf.ToHost(), hf) << "n=" << n;
  }
}

TEST(CudaKernelsTest, CastsToF32MatchReferenceForEveryPattern) {
  ZS_SKIP_WITHOUT_GPU();
  for (size_t n : {size_t{65536}, size_t{3}, size_t{65537 + 6}}) {
    std::vector<uint16_t> in(n);
    for (size_t i = 0; i < n; ++i) in[i] = uint16_t(i * 40503u + 1);  // covers all for 65536
    DeviceVector<uint16_t> d_in(in);
    DeviceVector<float> d_bf(n), d_hf(n);
    ZS_CUDA_OK(LaunchCastBF16ToF32(d_in.get(), d_bf.get(), n, nullptr));
    ZS_CUDA_OK(LaunchCastF16ToF32(d_in.get(), d_hf.get(), n, nullptr));
    ZS_CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> bf(n), hf(n);
    CastBF16ToF32Reference(in.data(), bf.data(), n);
    CastF16ToF32Reference(in.data(), hf.data(), n);
    EXPECT_EQ(AsBits(d_bf.ToHost()), AsBits(bf)) << "n=" << n;
    EXPECT_EQ(AsBits(d_hf.ToHost()), AsBits(hf)) << "n=" << n;
  }
}

TEST(CudaKernelsTest, ScaleAndCheckMatchesReference) {
  ZS_SKIP_WITHOUT_GPU();
  DeviceVector<int> d_flag(1);
  for (size_t n : kSizes) {
    std::vector<float> in = RandomFinite(n, uint32_t(n) + 1);
    // Pass 0: all finite. Pass 1: one inf at a random place (the flag must come back set).
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) in[(n * 7) / 11] = std::numeric_limits<float>::infinity();
      const float scale = 0.7f;
      for (int type = 0; type < 3; ++type) {
        ZS_CUDA_OK(cudaMemset(d_flag.get(), 0, sizeof(int)));
        bool expected_flag;
        if (type == 0) {
          DeviceVector<float> d_x(in);
          std::vector<float> ref(n);
          expected_flag = ScaleAndCheckF32Reference(in.data(), ref.data(), n, scale);
          ZS_CUDA_OK(LaunchScaleAndCheckF32(d_x.get(), d_x.get(), n, scale, d_flag.get(), nullptr));
          EXPECT_EQ(AsBits(d_x.ToHost()), AsBits(ref)) << "f32 n=" << n;
        } else {
          const std::vector<uint16_t> h = ToHalfBits(in, type == 1);
          DeviceVector<uint16_t> d_x(h), d_y(n);
          std::vector<uint16_t> ref(n);
          if (type == 1) {
            expected_flag = ScaleAndCheckBF16Reference(h.data(), ref.data(), n, scale);
            ZS_CUDA_OK(
                LaunchScaleAndCheckBF16(d_x.get(), d_y.get(), n, scale, d_flag.get(), nullptr));
          } else {
            expected_flag = ScaleAndCheckF16Reference(h.data(), ref.data(), n, scale);
            ZS_CUDA_OK(
                LaunchScaleAndCheckF16(d_x.get(), d_y.get(), n, scale, d_flag.get(), nullptr));
          }
          EXPECT_EQ(d_y.ToHost(), ref) << "type " << type << " n=" << n;
        }
        EXPECT_EQ(expected_flag, pass == 1);
        EXPECT_EQ(d_flag.ToHost()[0], pass == 1 ? 1 : 0) << "type " << type << " n=" << n;
      }
    }
  }
}

TEST(CudaKernelsTest, ScaleAndCheckFlagsF16Overflow) {
  ZS_SKIP_WITHOUT_GPU();
  const std::vector<uint16_t> h = ToHalfBits({1.f, 40000.f, -3.f}, /*bf16=*/false);
  DeviceVector<uint16_t> d_x(h);
  DeviceVector<int> d_flag(1);
  ZS_CUDA_OK(cudaMemset(d_flag.get(), 0, sizeof(int)));
  ZS_CUDA_OK(LaunchScaleAndCheckF16(d_x.get(), d_x.get(), h.size(), 2.f, d_flag.get(), nullptr));
  EXPECT_EQ(d_flag.ToHost()[0], 1);
}

TEST(CudaKernelsTest, GradSquaredNormMatchesReferenceBitExactly) {
  ZS_SKIP_WITHOUT_GPU();
  size_t ws_bytes = 0;
  ZS_CUDA_OK(GradSquaredNormWorkspaceBytes(kSizes.back(), &ws_bytes));
  DeviceVector<char> d_ws(ws_bytes);
  DeviceVector<double> d_out(1);
  for (size_t n : kSizes) {
    size_t need = 0;
    ZS_CUDA_OK(GradSquaredNormWorkspaceBytes(n, &need));
    ASSERT_LE(need, ws_bytes);
    const std::vector<float> x = RandomFinite(n, uint32_t(n) + 2);
    const std::vector<uint16_t> b = ToHalfBits(x, true), h = ToHalfBits(x, false);
    DeviceVector<float> d_x(x);
    DeviceVector<uint16_t> d_b(b), d_h(h);
    ZS_CUDA_OK(LaunchGradSquaredNormF32(d_x.get(), n, d_out.get(), d_ws.get(), ws_bytes, nullptr));
    EXPECT_EQ(std::bit_cast<uint64_t>(d_out.ToHost()[0]),
              std::bit_cast<uint64_t>(GradSquaredNormF32Reference(x.data(), n)))
        << "f32 n=" << n;
    ZS_CUDA_OK(LaunchGradSquaredNormBF16(d_b.get(), n, d_out.get(), d_ws.get(), ws_bytes, nullptr));
    EXPECT_EQ(std::bit_cast<uint64_t>(d_out.ToHost()[0]),
              std::bit_cast<uint64_t>(GradSquaredNormBF16Reference(b.data(), n)))
        << "bf16 n=" << n;
    ZS_CUDA_OK(LaunchGradSquaredNormF16(d_h.get(), n, d_out.get(), d_ws.get(), ws_bytes, nullptr));
    EXPECT_EQ(std::bit_cast<uint64_t>(d_out.ToHost()[0]),
              std::bit_cast<uint64_t>(GradSquaredNormF16Reference(h.data(), n)))
        << "f16 n=" << n;
  }
}

TEST(CudaKernelsTest, GradSquaredNormPropagatesNanAndInf) {
  ZS_SKIP_WITHOUT_GPU();
  size_t ws_bytes = 0;
  ZS_CUDA_OK(GradSquaredNormWorkspaceBytes(1000, &ws_bytes));
  DeviceVector<char> d_ws(ws_bytes);
  DeviceVector<double> d_out(1);
  std::vector<float> x = RandomFinite(1000, 5);
  x[500] = -std::numeric_limits<float>::infinity();
  {
    DeviceVector<float> d_x(x);
    ZS_CUDA_OK(
        LaunchGradSquaredNormF32(d_x.get(), x.size(), d_out.get(), d_ws.get(), ws_bytes, nullptr));
    EXPECT_EQ(d_out.ToHost()[0], std::numeric_limits<double>::infinity());
  }
  x[7] = std::numeric_limits<float>::quiet_NaN();
  DeviceVector<float> d_x(x);
  ZS_CUDA_OK(
      LaunchGradSquaredNormF32(d_x.get(), x.size(), d_out.get(), d_ws.get(), ws_bytes, nullptr));
  EXPECT_TRUE(std::isnan(d_out.ToHost()[0]));
}

}  // namespace
}  // namespace zs::kernels
