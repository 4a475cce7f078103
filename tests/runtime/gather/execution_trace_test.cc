#include "runtime/gather/execution_trace.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace zs {
namespace {

using Entries = std::vector<int>;

ExecutionTrace Recorded(const std::vector<int64_t>& weights, const Entries& order) {
  ExecutionTrace trace(weights);
  for (int u : order) trace.Record(u);
  EXPECT_FALSE(trace.EndStep());
  return trace;
}

TEST(ExecutionTraceTest, RecordsThenReplays) {
  ExecutionTrace trace({1, 2, 3});
  EXPECT_EQ(trace.mode(), ExecutionTrace::Mode::kRecording);
  trace.Record(0);
  trace.Record(2);
  trace.Record(0);
  EXPECT_EQ(trace.position(), 3u);
  EXPECT_FALSE(trace.EndStep());
  ASSERT_TRUE(trace.replaying());
  EXPECT_EQ(trace.entries(), (Entries{0, 2, 0}));
  EXPECT_EQ(trace.position(), 0u);
  EXPECT_TRUE(trace.Advance(0));
  EXPECT_FALSE(trace.Advance(0));  // 2 is expected
  EXPECT_EQ(trace.position(), 1u);
  EXPECT_TRUE(trace.Advance(2));
  EXPECT_TRUE(trace.Advance(0));
  EXPECT_FALSE(trace.Advance(0));  // past the end
  EXPECT_FALSE(trace.EndStep());   // consumed completely: rewinds
  EXPECT_TRUE(trace.replaying());
  EXPECT_EQ(trace.position(), 0u);
  EXPECT_EQ(trace.entries(), (Entries{0, 2, 0}));
}

TEST(ExecutionTraceTest, EmptyRecordingStaysRecording) {
  ExecutionTrace trace({1});
  EXPECT_FALSE(trace.EndStep());
  EXPECT_FALSE(trace.replaying());
  EXPECT_EQ(trace.size(), 0u);
}

TEST(ExecutionTraceTest, DivergeKeepsTheMatchedPrefix) {
  ExecutionTrace trace = Recorded({1, 1, 1, 1}, {0, 1, 2, 3});
  EXPECT_TRUE(trace.Advance(0));
  EXPECT_TRUE(trace.Advance(1));
  EXPECT_FALSE(trace.Advance(3));
  trace.Diverge();
  EXPECT_FALSE(trace.replaying());
  EXPECT_EQ(trace.entries(), (Entries{0, 1}));
  trace.Record(3);
  trace.Record(2);
  EXPECT_FALSE(trace.EndStep());
  EXPECT_TRUE(trace.replaying());
  EXPECT_EQ(trace.entries(), (Entries{0, 1, 3, 2}));
}

TEST(ExecutionTraceTest, EarlyEndTruncates) {
  ExecutionTrace trace = Recorded({1, 1, 1}, {0, 1, 2});
  EXPECT_TRUE(trace.Advance(0));
  EXPECT_TRUE(trace.EndStep());
  EXPECT_TRUE(trace.replaying());
  EXPECT_EQ(trace.entries(), (Entries{0}));
  // A replay step with no Acquire at all truncates to nothing: recording again.
  EXPECT_TRUE(trace.EndStep());
  EXPECT_FALSE(trace.replaying());
  EXPECT_EQ(trace.size(), 0u);
}

TEST(ExecutionTraceTest, ReuseDistanceSumsTheWeightsInBetween) {
  const std::vector<int64_t> weights = {10, 20, 0, 7};
  const Entries order = {0, 1, 3, 0, 2, 1, 3, 1};
  ExecutionTrace trace = Recorded(weights, order);
  EXPECT_EQ(trace.ReuseDistance(0), std::optional<int64_t>(0));  // next entry
  for (size_t pos = 0; pos <= order.size(); ++pos) {
    for (int u = 0; u < 4; ++u) {
      // Reference: a plain scan.
      std::optional<int64_t> expected;
      int64_t sum = 0;
      for (size_t i = pos; i < order.size(); ++i) {
        if (order[i] == u) {
          expected = sum;
          break;
        }
        sum += weights[order[i]];
      }
      EXPECT_EQ(trace.ReuseDistance(u), expected) << "pos " << pos << " unit " << u;
    }
    if (pos < order.size()) {
      ASSERT_TRUE(trace.Advance(order[pos]));
    }
  }
  // While recording nothing is predicted.
  ExecutionTrace recording(weights);
  recording.Record(0);
  EXPECT_EQ(recording.ReuseDistance(0), std::nullopt);
}

TEST(ExecutionTraceDeathTest, MisuseIsACheck) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ExecutionTrace trace({1});
  EXPECT_DEATH(trace.Record(1), "out of range");
  EXPECT_DEATH(trace.Advance(0), "while recording");
}

}  // namespace
}  // namespace zs
