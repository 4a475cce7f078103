// The GPU dispatch (thrust::cuda::par) against the CPU one (thrust::cpp::par): the same
// template, so the same plan element for element. Skips itself without a GPU (no driver:
// cudaGetDeviceCount fails; or zero devices); the argument checks run everywhere.
#include "runtime/parallel/expert/token_dispatch_cuda.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "runtime/parallel/expert/token_dispatch.h"

namespace zs {
namespace {

TEST(TokenDispatchCudaTest, ArgumentErrorsNeedNoGpu) {
  const std::vector<int32_t> choices = {0, 1, 2};
  EXPECT_EQ(PlanDispatchCudaFromHost(choices, 2, 3, 4).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanDispatchCudaFromHost(choices, 1, 3, -1).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(TokenDispatchCudaTest, WithoutGpuSaysUnavailable) {
  const Status available = CudaDispatchAvailable();
  if (available.ok()) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_EQ(available.code(), StatusCode::kUnavailable) << available.ToString();
  const std::vector<int32_t> choices = {0, 1};
  EXPECT_EQ(PlanDispatchCudaFromHost(choices, 1, 2, 2).status().code(), StatusCode::kUnavailable);
}

TEST(TokenDispatchCudaTest, MatchesCpuPlan) {
  const Status available = CudaDispatchAvailable();
  if (!available.ok()) GTEST_SKIP() << "no GPU: " << available.ToString();
  std::mt19937_64 rng(7);
  for (int k : {1, 2}) {
    for (int num_experts : {1, 4, 64}) {
      for (int64_t tokens : {0, 1, 33, 4096, 100'000}) {
        std::vector<int32_t> choices(size_t(tokens * k));
        for (int32_t& e : choices) e = int32_t(rng() % uint64_t(num_experts));
        const int64_t fair = (tokens * k + num_experts - 1) / num_experts;
        for (int64_t capacity : {int64_t{0}, fair / 2 + 1, fair, tokens * k}) {
          StatusOr<DispatchPlan> cpu = PlanDispatch(choices, k, num_experts, capacity);
          StatusOr<DispatchPlan> gpu = PlanDispatchCudaFromHost(choices, k, num_experts, capacity);
          ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
          ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
          EXPECT_EQ(gpu->routed, cpu->routed);
          EXPECT_EQ(gpu->kept, cpu->kept);
          EXPECT_EQ(gpu->offsets, cpu->offsets);
          EXPECT_EQ(gpu->assignment, cpu->assignment);
          EXPECT_EQ(gpu->slot, cpu->slot);
        }
      }
    }
  }
  std::vector<int32_t> bad = {0, 5, 1, -2};
  StatusOr<DispatchPlan> gpu = PlanDispatchCudaFromHost(bad, 1, 4, 4);
  EXPECT_EQ(gpu.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(gpu.status().message().find("2 expert choice(s) outside [0, 4)"), std::string::npos)
      << gpu.status().ToString();
}

}  // namespace
}  // namespace zs
