// The measured pipeline bubble of each schedule against the closed forms (schedule_simulator.h),
// with ranks as threads (the `local` backend), world size 4 (and 2).
//
// The chunks' compute is a fixed sleep, not arithmetic: the test hosts may have 2 cores, and
// CPU-bound chunks on 4 thread-ranks would measure CPU contention instead of the schedule. A
// sleep costs no CPU, so the ranks' timelines follow the schedule's dependencies only. Timing is
// still noisy (sleeps overshoot, threads wake late on a loaded host), so each schedule runs a
// few steps and the median measured bubble must lie within 10% of the formula plus a small
// absolute slack; the interleaved schedule must also measure a smaller bubble than 1F1B.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/backend_registry.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/parallel/pipeline/pipeline_runner.h"
#include "runtime/parallel/pipeline/schedule_simulator.h"

namespace zs {
namespace {

using std::chrono::microseconds;

// Sleeps a fixed time per Forward and Backward; passes 16 floats between chunks.
class SleepChunk : public PipelineChunk {
 public:
  SleepChunk(bool first, bool last, microseconds forward, microseconds backward)
      : first_(first), last_(last), forward_(forward), backward_(backward) {}
  int64_t input_elements() const override { return first_ ? 0 : kElements; }
  int64_t output_elements() const override { return last_ ? 0 : kElements; }
  StatusOr<float> Forward(int, std::span<const float>, std::span<float> output) override {
    std::this_thread::sleep_for(forward_);
    std::fill(output.begin(), output.end(), 1.f);
    return 1.f;
  }
  Status Backward(int, std::span<const float>, std::span<float> input_grad) override {
    std::this_thread::sleep_for(backward_);
    std::fill(input_grad.begin(), input_grad.end(), 1.f);
    return OkStatus();
  }

 private:
  static constexpr int64_t kElements = 16;
  const bool first_, last_;
  const microseconds forward_, backward_;
};

constexpr int kSteps = 5;
// A stage's forward takes 6 ms, its backward 12 ms (split evenly over its virtual stages).
constexpr microseconds kStageForward{6000};
constexpr microseconds kStageBackward{12000};

// The median over kSteps steps of the measured bubble fraction.
double MeasureBubble(ScheduleKind kind, int p, int m, int v) {
  std::vector<std::vector<PipelineStepResult>> results(kSteps, std::vector<PipelineStepResult>(p));
  CommOptions options;
  options.group_name = "pp";
  options.timeout = std::chrono::milliseconds(30'000);
  Status status =
      RunLocalRanks(p, options, [&](int rank, Communicator& pp, MemoryTracker&) -> Status {
        ZS_ASSIGN_OR_RETURN(PipelineSchedule schedule, BuildSchedule(kind, p, m, v));
        std::vector<std::unique_ptr<SleepChunk>> mine;
        std::vector<PipelineChunk*> pointers;
        for (int j = 0; j < v; ++j) {
          const int chunk = j * p + rank;
          mine.push_back(std::make_unique<SleepChunk>(chunk == 0, chunk == p * v - 1,
                                                      kStageForward / v, kStageBackward / v));
          pointers.push_back(mine.back().get());
        }
        ZS_ASSIGN_OR_RETURN(std::unique_ptr<PipelineRunner> runner,
                            PipelineRunner::Create(pp, schedule, pointers));
        for (int step = 0; step < kSteps; ++step) {
          ZS_RETURN_IF_ERROR(pp.Barrier());  // the ranks start each step together
          ZS_ASSIGN_OR_RETURN(results[step][rank], runner->RunStep());
        }
        return OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status.ToString();
  std::vector<double> bubbles;
  for (const auto& step : results) bubbles.push_back(MeasuredBubbleFraction(step));
  std::sort(bubbles.begin(), bubbles.end());
  return bubbles[kSteps / 2];
}

void ExpectBubbleNearFormula(ScheduleKind kind, int p, int m, int v, double* measured_out) {
  const double ideal = IdealBubbleFraction(kind, p, m, v);
  // The simulator's bubble of the same lists and costs is the formula (pipeline_plan_test
  // checks it for every configuration; here for the one measured).
  StatusOr<PipelineSchedule> schedule = BuildSchedule(kind, p, m, v);
  ASSERT_TRUE(schedule.ok());
  StatusOr<ScheduleSimulation> sim =
      SimulateSchedule(*schedule, ChunkCosts::Uniform(p * v, kStageForward.count() / double(v),
                                                      kStageBackward.count() / double(v)));
  ASSERT_TRUE(sim.ok());
  EXPECT_NEAR(sim->bubble_fraction, ideal, 1e-12);
  const double measured = MeasureBubble(kind, p, m, v);
  ::testing::Test::RecordProperty(std::string(ScheduleKindName(kind)) + "_measured",
                                  std::to_string(measured));
  std::printf("%-11s p=%d m=%d v=%d: measured bubble %.4f, formula %.4f\n",
              std::string(ScheduleKindName(kind)).c_str(), p, m, v, measured, ideal);
  EXPECT_NEAR(measured, ideal, 0.10 * ideal + 0.03)
      << ScheduleKindName(kind) << " p=" << p << " m=" << m << " v=" << v;
  if (measured_out != nullptr) *measured_out = measured;
}

TEST(PipelineBubbleTest, MeasuredBubbleMatchesTheFormulas) {
  RegisterBuiltinBackends();
  double one_f_one_b = 0, interleaved = 0;
  ExpectBubbleNearFormula(ScheduleKind::kGPipe, 4, 8, 1, nullptr);             // 3/11  = 0.273
  ExpectBubbleNearFormula(ScheduleKind::kOneFOneB, 4, 8, 1, &one_f_one_b);     // 3/11  = 0.273
  ExpectBubbleNearFormula(ScheduleKind::kInterleaved, 4, 8, 2, &interleaved);  // 1.5/9.5 = 0.158
  ExpectBubbleNearFormula(ScheduleKind::kOneFOneB, 2, 4, 1, nullptr);          // 1/5   = 0.2
  EXPECT_LT(interleaved, one_f_one_b) << "virtual stages shrink the bubble";
}

}  // namespace
}  // namespace zs
