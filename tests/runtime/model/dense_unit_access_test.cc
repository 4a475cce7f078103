#include "runtime/model/dense_unit_access.h"

#include <gtest/gtest.h>

namespace zs {
namespace {

ModelSpec TwoUnits() {
  ModelSpec spec;
  spec.units.push_back({"embed", {{"wte", {3, 2}, true}, {"scale", {}, false}}});
  spec.units.push_back({"head", {{"bias", {5}, false}}});
  return spec;
}

// Each value encodes where it lives: unit * 100 + param * 10 + index.
void Init(int unit, int param, std::span<float> values) {
  for (size_t i = 0; i < values.size(); ++i) values[i] = unit * 100 + param * 10 + float(i);
}

TEST(DenseUnitAccessTest, InitFillsEveryParameterAndGradsStartAtZero) {
  DenseUnitAccess access(TwoUnits(), Init);
  ASSERT_EQ(access.num_units(), 2);
  ASSERT_EQ(access.ParamData(0, 0).size(), 6u);
  ASSERT_EQ(access.ParamData(0, 1).size(), 1u);  // a scalar
  ASSERT_EQ(access.ParamData(1, 0).size(), 5u);
  EXPECT_EQ(access.ParamData(0, 0)[5], 5.0f);
  EXPECT_EQ(access.ParamData(0, 1)[0], 10.0f);
  EXPECT_EQ(access.ParamData(1, 0)[4], 104.0f);
  EXPECT_EQ(access.UnitParams(0).size(), 7u);
  EXPECT_EQ(access.UnitParams(0)[6], 10.0f);  // params concatenated in spec order
  for (int u = 0; u < 2; ++u) {
    for (float g : access.UnitGrads(u)) EXPECT_EQ(g, 0.0f);
  }
  EXPECT_EQ(access.backward_scale(), 1.0f);
  access.set_backward_scale(0.25f);
  EXPECT_EQ(access.backward_scale(), 0.25f);
}

TEST(DenseUnitAccessTest, BracketsNestAcrossUnitsAndGradsAccumulateUntilZeroed) {
  DenseUnitAccess access(TwoUnits(), Init);
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(access.BeginForward(1).ok());
    ASSERT_TRUE(access.BeginForward(0).ok());  // a tied weight read inside another unit
    EXPECT_EQ(access.Param(0, 0)[1], 1.0f);
    ASSERT_TRUE(access.EndForward(0).ok());
    EXPECT_EQ(access.Param(1, 0)[0], 100.0f);
    ASSERT_TRUE(access.EndForward(1).ok());
    ASSERT_TRUE(access.BeginForward(0).ok());
    ASSERT_TRUE(access.EndForward(0).ok());
    EXPECT_EQ(access.pending_backward(0), 2);
    EXPECT_EQ(access.pending_backward(1), 1);
    EXPECT_TRUE(access.idle());

    ASSERT_TRUE(access.BeginBackward(1).ok());
    ASSERT_TRUE(access.BeginBackward(0).ok());
    EXPECT_FALSE(access.idle());
    access.Grad(0, 0)[2] += 1.5f;
    ASSERT_TRUE(access.EndBackward(0).ok());
    access.Grad(1, 0)[3] += 2.0f;
    ASSERT_TRUE(access.EndBackward(1).ok());
    ASSERT_TRUE(access.BeginBackward(0).ok());
    access.Grad(0, 0)[2] += 0.5f;
    ASSERT_TRUE(access.EndBackward(0).ok());
    EXPECT_EQ(access.pending_backward(0), 0);
    EXPECT_EQ(access.pending_backward(1), 0);
  }
  EXPECT_EQ(access.GradData(0, 0)[2], 4.0f);  // two passes of 1.5 + 0.5
  EXPECT_EQ(access.GradData(1, 0)[3], 4.0f);
  EXPECT_EQ(access.trace().size(), 24u);
  EXPECT_EQ(access.trace()[0], (DenseUnitAccess::Event{DenseUnitAccess::Event::kBeginForward, 1}));
  EXPECT_EQ(access.trace()[11], (DenseUnitAccess::Event{DenseUnitAccess::Event::kEndBackward, 0}));
  access.ClearTrace();
  EXPECT_TRUE(access.trace().empty());
  access.ZeroGrads();
  EXPECT_EQ(access.GradData(0, 0)[2], 0.0f);
  EXPECT_EQ(access.GradData(1, 0)[3], 0.0f);
}

TEST(DenseUnitAccessDeathTest, OutOfOrderCallsAreCaught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DenseUnitAccess access(TwoUnits(), Init);
  EXPECT_DEATH((void)access.Param(0, 0), "outside a bracket");
  EXPECT_DEATH((void)access.EndForward(0), "without BeginForward");
  EXPECT_DEATH((void)access.BeginBackward(0), "no forward bracket left");
  ASSERT_TRUE(access.BeginForward(0).ok());
  EXPECT_DEATH((void)access.BeginForward(0), "already open");
  EXPECT_DEATH((void)access.Grad(0, 0), "outside a backward bracket");
  EXPECT_DEATH((void)access.Param(0, 2), "has no parameter 2");
  ASSERT_TRUE(access.EndForward(0).ok());
  EXPECT_DEATH((void)access.EndBackward(0), "without BeginBackward");
}

TEST(DenseUnitAccessDeathTest, InvalidSpecIsCaught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(DenseUnitAccess(ModelSpec{}, Init), "invalid ModelSpec");
}

}  // namespace
}  // namespace zs
