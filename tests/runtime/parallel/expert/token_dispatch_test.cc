// PlanDispatch (Thrust, CPU) against a plain scalar reference of the drop rule: random
// assignments, ties (every token on one expert), capacity drops, k = 1 and 2, and the errors.
#include "runtime/parallel/expert/token_dispatch.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace zs {
namespace {

// The rule of token_dispatch.h, written the obvious way.
DispatchPlan ReferencePlan(const std::vector<int32_t>& expert_of, int k, int num_experts,
                           int64_t capacity) {
  DispatchPlan plan;
  const int64_t tokens = int64_t(expert_of.size()) / k;
  plan.tokens = tokens;
  plan.k = k;
  plan.num_experts = num_experts;
  plan.capacity = capacity;
  plan.routed.assign(num_experts, 0);
  plan.kept.assign(num_experts, 0);
  plan.offsets.assign(num_experts + 1, 0);
  plan.slot.assign(expert_of.size(), -1);
  for (int e = 0; e < num_experts; ++e) {
    plan.offsets[e] = int32_t(plan.assignment.size());
    for (int j = 0; j < k; ++j) {
      for (int64_t t = 0; t < tokens; ++t) {
        const int32_t a = int32_t(t * k + j);
        if (expert_of[a] != e) continue;
        ++plan.routed[e];
        if (plan.kept[e] < capacity) {
          ++plan.kept[e];
          plan.slot[a] = int32_t(plan.assignment.size());
          plan.assignment.push_back(a);
        }
      }
    }
  }
  plan.offsets[num_experts] = int32_t(plan.assignment.size());
  return plan;
}

void ExpectSamePlan(const DispatchPlan& got, const DispatchPlan& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.routed, want.routed) << what;
  EXPECT_EQ(got.kept, want.kept) << what;
  EXPECT_EQ(got.offsets, want.offsets) << what;
  EXPECT_EQ(got.assignment, want.assignment) << what;
  EXPECT_EQ(got.slot, want.slot) << what;
  EXPECT_EQ(got.rows(), want.rows()) << what;
}

std::vector<int32_t> RandomChoices(int64_t tokens, int k, int num_experts, bool distinct,
                                   uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> out(size_t(tokens * k));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < k; ++j) {
      int32_t e;
      do {
        e = int32_t(rng() % uint64_t(num_experts));
      } while (distinct && j == 1 && e == out[t * k]);
      out[t * k + j] = e;
    }
  }
  return out;
}

TEST(TokenDispatchTest, MatchesReferenceOnRandomChoices) {
  uint64_t seed = 1;
  for (int k : {1, 2}) {
    for (int num_experts : {1, 2, 3, 8}) {
      for (int64_t tokens : {0, 1, 7, 64, 257}) {
        for (bool distinct : {true, false}) {
          if (distinct && k == 2 && num_experts < 2) continue;
          const std::vector<int32_t> choices =
              RandomChoices(tokens, k, num_experts, distinct, ++seed);
          const int64_t fair = (tokens * k + num_experts - 1) / num_experts;
          for (int64_t capacity : {int64_t{0}, int64_t{1}, fair / 2, fair, tokens * k + 5}) {
            const std::string what =
                "k=" + std::to_string(k) + " E=" + std::to_string(num_experts) +
                " T=" + std::to_string(tokens) + " C=" + std::to_string(capacity) +
                (distinct ? " distinct" : " repeats");
            StatusOr<DispatchPlan> plan = PlanDispatch(choices, k, num_experts, capacity);
            ASSERT_TRUE(plan.ok()) << what << ": " << plan.status().ToString();
            ExpectSamePlan(*plan, ReferencePlan(choices, k, num_experts, capacity), what);
          }
        }
      }
    }
  }
}

TEST(TokenDispatchTest, TiesKeepTokenOrderAndFirstChoicesWin) {
  // Every token's first choice is expert 2 and second choice expert 0; tokens 0..9.
  const int k = 2;
  std::vector<int32_t> choices;
  for (int t = 0; t < 10; ++t) {
    choices.push_back(2);
    choices.push_back(0);
  }
  StatusOr<DispatchPlan> plan = PlanDispatch(choices, k, 3, /*capacity=*/4);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->routed, (std::vector<int32_t>{10, 0, 10}));
  EXPECT_EQ(plan->kept, (std::vector<int32_t>{4, 0, 4}));
  EXPECT_EQ(plan->offsets, (std::vector<int32_t>{0, 4, 4, 8}));
  // Expert 0 keeps tokens 0..3's second choices, expert 2 tokens 0..3's first choices.
  EXPECT_EQ(plan->assignment, (std::vector<int32_t>{1, 3, 5, 7, 0, 2, 4, 6}));
  EXPECT_EQ(plan->dropped(), 12);
  for (int t = 4; t < 10; ++t) {
    EXPECT_EQ(plan->slot[t * k], -1) << t;
    EXPECT_EQ(plan->slot[t * k + 1], -1) << t;
  }

  // A second choice never displaces a later token's first choice: expert 1 is token 0's second
  // choice and tokens 1..3's first choice; with capacity 3 token 0 loses it.
  choices = {0, 1, 1, 0, 1, 0, 1, 0};
  plan = PlanDispatch(choices, k, 2, /*capacity=*/3);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->slot[1], -1);       // token 0, choice 1 (expert 1): dropped
  EXPECT_EQ(plan->assignment[0], 0);  // expert 0 keeps token 0's first choice first
  EXPECT_EQ(plan->kept, (std::vector<int32_t>{3, 3}));
  EXPECT_EQ(plan->slot[7], -1);  // token 3's second choice (expert 0): 4th
}

TEST(TokenDispatchTest, InversePermutationRoundTrips) {
  const std::vector<int32_t> choices = RandomChoices(100, 2, 5, true, 99);
  StatusOr<DispatchPlan> plan = PlanDispatch(choices, 2, 5, 30);
  ASSERT_TRUE(plan.ok());
  int64_t kept = 0;
  for (size_t a = 0; a < choices.size(); ++a) {
    if (plan->slot[a] < 0) continue;
    ++kept;
    EXPECT_EQ(plan->assignment[plan->slot[a]], int32_t(a));
    const int32_t e = choices[a];
    EXPECT_GE(plan->slot[a], plan->offsets[e]);
    EXPECT_LT(plan->slot[a], plan->offsets[e + 1]);
  }
  EXPECT_EQ(kept, plan->rows());
}

TEST(TokenDispatchTest, Errors) {
  const std::vector<int32_t> choices = {0, 1, 2, 3};
  StatusOr<DispatchPlan> bad = PlanDispatch(choices, 2, 3, 4);  // 3 is outside [0, 3)
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("outside [0, 3)"), std::string::npos)
      << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("token 1 choice 1: 3"), std::string::npos)
      << bad.status().ToString();
  const std::vector<int32_t> negative = {0, -1};
  EXPECT_EQ(PlanDispatch(negative, 1, 3, 4).status().code(), StatusCode::kInvalidArgument);
  bad = PlanDispatch(std::vector<int32_t>{0, 1, 2}, 2, 3, 4);  // not a multiple of k
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("3 expert choices with k=2"), std::string::npos)
      << bad.status().ToString();
  EXPECT_EQ(PlanDispatch(choices, 0, 4, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanDispatch(choices, 1, 0, 4).status().code(), StatusCode::kInvalidArgument);
  bad = PlanDispatch(choices, 1, 4, -1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("capacity=-1"), std::string::npos);
}

}  // namespace
}  // namespace zs
