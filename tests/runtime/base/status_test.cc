#include "runtime/base/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace zs {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd value " + std::to_string(x));
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  ZS_ASSIGN_OR_RETURN(int h, Half(x));
  ZS_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  ZS_RETURN_IF_ERROR(Half(x));
  return OkStatus();
}

TEST(StatusTest, OkAndErrorsCarryCodeAndMessage) {
  EXPECT_TRUE(OkStatus().ok());
  Status s = DeadlineExceededError("all_reduce on group 'dp' waited 10 ms for rank 3");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.ToString(), "DEADLINE_EXCEEDED: all_reduce on group 'dp' waited 10 ms for rank 3");
  EXPECT_EQ(s.WithContext("step 7").message(),
            "step 7: all_reduce on group 'dp' waited 10 ms for rank 3");
  EXPECT_EQ(s.WithContext("step 7").code(), StatusCode::kDeadlineExceeded);
}

TEST(StatusTest, MacrosPropagateTheFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  StatusOr<int> r = Quarter(6);  // 6 -> 3 -> odd
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "odd value 3");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(5).code(), StatusCode::kInvalidArgument);
}

TEST(StatusTest, StatusOrHoldsMoveOnlyValues) {
  StatusOr<std::unique_ptr<int>> p = std::make_unique<int>(7);
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> owned = std::move(p).value();
  EXPECT_EQ(*owned, 7);
}

TEST(StatusDeathTest, ValueOfAnErrorIsABug) {
  StatusOr<int> r = NotFoundError("no such key");
  EXPECT_DEATH((void)r.value(), "no such key");
}

}  // namespace
}  // namespace zs
