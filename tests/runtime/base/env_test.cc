#include "runtime/base/env.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace zs {
namespace {

TEST(EnvTest, ParsesSizesAndRejectsGarbageNamingTheVariable) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096);
  EXPECT_EQ(*ParseByteSize("64k"), 65536);
  EXPECT_EQ(*ParseByteSize("16M"), 16 << 20);
  EXPECT_EQ(*ParseByteSize("1G"), int64_t{1} << 30);
  EXPECT_FALSE(ParseByteSize("12q").ok());

  ::unsetenv("ZS_TEST_KNOB");
  EXPECT_EQ(*ParseEnvInt("ZS_TEST_KNOB", 5), 5);
  ::setenv("ZS_TEST_KNOB", "2M", 1);
  EXPECT_EQ(*ParseEnvInt("ZS_TEST_KNOB", 5), 2 << 20);
  ::setenv("ZS_TEST_KNOB", "lots", 1);
  auto bad = ParseEnvInt("ZS_TEST_KNOB", 5);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ZS_TEST_KNOB='lots'"), std::string::npos);

  ::setenv("ZS_TEST_KNOB", "off", 1);
  EXPECT_FALSE(*ParseEnvBool("ZS_TEST_KNOB", true));
  ::setenv("ZS_TEST_KNOB", "maybe", 1);
  EXPECT_FALSE(ParseEnvBool("ZS_TEST_KNOB", true).ok());
  ::setenv("ZS_TEST_KNOB", "0.25", 1);
  EXPECT_DOUBLE_EQ(*ParseEnvDouble("ZS_TEST_KNOB", 1.0), 0.25);
  ::unsetenv("ZS_TEST_KNOB");
}

}  // namespace
}  // namespace zs
