// ScopedLogThreshold: raises the calling thread's threshold while alive, nests, restores, and
// leaves other threads alone.
#include "runtime/base/log.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

namespace zs {
namespace {

TEST(ScopedLogThreshold, RaisesNestsRestoresPerThread) {
  if (std::getenv("ZS_LOG_LEVEL") != nullptr) GTEST_SKIP() << "ZS_LOG_LEVEL is set";
  ASSERT_TRUE(LogEnabled(LogLevel::kInfo));
  {
    ScopedLogThreshold quiet(LogLevel::kError);
    EXPECT_FALSE(LogEnabled(LogLevel::kWarn));
    EXPECT_TRUE(LogEnabled(LogLevel::kError));
    {
      ScopedLogThreshold lower(LogLevel::kInfo);  // cannot lower an enclosing scope's
      EXPECT_FALSE(LogEnabled(LogLevel::kWarn));
    }
    EXPECT_FALSE(LogEnabled(LogLevel::kWarn));
    bool other_thread_warns = false;
    std::thread([&] { other_thread_warns = LogEnabled(LogLevel::kWarn); }).join();
    EXPECT_TRUE(other_thread_warns);
  }
  EXPECT_TRUE(LogEnabled(LogLevel::kInfo));
}

}  // namespace
}  // namespace zs
