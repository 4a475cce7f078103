// runtime/base/cpu_affinity.h: the allowed CPUs as the kernel reports them, binding the calling
// thread (and what threads it then creates inherit), and the errors for CPUs out of range.
#include "runtime/base/cpu_affinity.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <thread>

namespace zs {
namespace {

TEST(CpuAffinityTest, AllowedCpusAreSortedAndIncludeTheCurrentOne) {
  const std::vector<int> cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_TRUE(std::is_sorted(cpus.begin(), cpus.end()));
  EXPECT_NE(std::find(cpus.begin(), cpus.end(), ::sched_getcpu()), cpus.end());
}

// Binding runs in a thread of its own so that the test process keeps its CPUs.
TEST(CpuAffinityTest, BindsTheCallingThreadAndItsChildrenInherit) {
  const std::vector<int> cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  const int target = cpus.back();
  std::vector<int> bound, child, main_after;
  Status status;
  std::thread([&] {
    status = BindThisThreadToCpu(target);
    bound = AllowedCpus();
    std::thread([&] { child = AllowedCpus(); }).join();
  }).join();
  main_after = AllowedCpus();
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(bound, std::vector<int>{target});
  EXPECT_EQ(child, std::vector<int>{target});
  EXPECT_EQ(main_after, cpus);  // only the bound thread changed
}

TEST(CpuAffinityTest, OutOfRangeCpusAreErrorsNamingThem) {
  for (int cpu : {-1, CPU_SETSIZE}) {
    Status s;
    std::thread([&] { s = BindThisThreadToCpu(cpu); }).join();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("CPU " + std::to_string(cpu)), std::string::npos) << s.ToString();
  }
}

}  // namespace
}  // namespace zs
