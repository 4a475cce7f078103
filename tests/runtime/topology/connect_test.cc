// ConnectFromEnvironment (runtime/comm/connect.h) in one process: a single rank with no launch
// variables, the environment overrides, and their errors. The multi-process path is the
// comm_check_fabric_* tests (zerorun + comm_check_worker).
#include "runtime/comm/connect.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace zs {
namespace {

// Sets environment variables for one test and restores them after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ConnectTest, SingleRankWithoutLauncher) {
  for (const char* v : {"ZS_RANK", "ZS_WORLD_SIZE", "ZS_BACKEND", "ZS_COMM_TIMEOUT_MS",
                        "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    ::unsetenv(v);
  }
  auto comm = ConnectFromEnvironment("local");
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  EXPECT_EQ((*comm)->rank(), 0);
  EXPECT_EQ((*comm)->size(), 1);
  EXPECT_EQ((*comm)->backend_name(), "local");
  EXPECT_EQ((*comm)->launch().launcher, "single");
  EXPECT_EQ((*comm)->group_name(), "world");
  // The store it was connected through lives as long as it does.
  ASSERT_TRUE((*comm)->store().Set("still/here", "yes").ok());
  float x = 2.5f, y = 0;
  ASSERT_TRUE((*comm)->AllReduce(&x, &y, 1, DType::kF32, ReduceOp::kSum).ok());
  EXPECT_EQ(y, 2.5f);
  auto child = (*comm)->Split(0, 0, "child");
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  EXPECT_EQ((*child)->size(), 1);
  ASSERT_TRUE((*child)->Barrier().ok());
}

TEST(ConnectTest, EnvironmentOverrides) {
  ScopedEnv timeout("ZS_COMM_TIMEOUT_MS", "1234");
  {
    ScopedEnv backend("ZS_BACKEND", "local");
    auto comm = ConnectFromEnvironment("no-such-backend");
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    EXPECT_EQ((*comm)->backend_name(), "local");
    EXPECT_EQ((*comm)->options().timeout.count(), 1234);
  }
  {
    ScopedEnv backend("ZS_BACKEND", "carrier-pigeon");
    auto comm = ConnectFromEnvironment("local");
    ASSERT_FALSE(comm.ok());
    EXPECT_EQ(comm.status().code(), StatusCode::kNotFound);
    EXPECT_NE(comm.status().message().find("carrier-pigeon"), std::string::npos)
        << comm.status().ToString();
  }
}

TEST(ConnectTest, ErrorsNameTheVariable) {
  {
    ScopedEnv timeout("ZS_COMM_TIMEOUT_MS", "soon");
    auto comm = ConnectFromEnvironment("local");
    ASSERT_FALSE(comm.ok());
    EXPECT_NE(comm.status().message().find("ZS_COMM_TIMEOUT_MS='soon'"), std::string::npos)
        << comm.status().ToString();
  }
  {
    ScopedEnv rank("ZS_RANK", "1");
    ScopedEnv world("ZS_WORLD_SIZE", "2");
    auto comm = ConnectFromEnvironment("local");
    ASSERT_FALSE(comm.ok());
    EXPECT_NE(comm.status().message().find("ZS_RENDEZVOUS is not set"), std::string::npos)
        << comm.status().ToString();
  }
}

}  // namespace
}  // namespace zs
