// SimulateSchedule: runs a PipelineSchedule on paper with given per-chunk costs and reports
// when each instruction runs, each rank's busy time, the makespan and the bubble. Pure.
//
// Contract
// - Every rank executes its list in order; an instruction starts at the latest of: its rank's
//   previous instruction's end, and the end of the instructions whose data it needs (plus
//   `transfer` when that instruction ran on another rank):
//     Forward(mb, c):  Forward(mb, c - 1) for c > 0.
//     Backward(mb, c): Forward(mb, c) (same rank), and Backward(mb, c + 1) for c < last.
//   This is the as-soon-as-possible execution of the lists with buffered sends: exactly what
//   PipelineRunner does when sending costs nothing.
// - Bubble fraction (the quantity of the formulas in pipeline_schedule.h): the idle share of the
//   ranks x makespan rectangle,
//       bubble_fraction = 1 - sum over ranks of busy_r / (ranks * makespan),
//   where busy_r is the sum of rank r's instruction costs and every rank's clock starts at 0
//   (the step's start) and ends at the makespan (the last instruction's end on any rank). With
//   equal costs it is (p-1)/(m+p-1) for GPipe and 1F1B, ((p-1)/v)/(m+(p-1)/v) for interleaved
//   (IdealBubbleFraction).
// - Costs come per chunk (ChunkCosts: every micro-batch of a chunk costs the same, the
//   formulas' premise) or per instruction (InstructionCosts: e.g. each instruction's measured
//   duration, to replay a step as it ran and separate the schedule's bubble from the runtime's
//   own idle time; [Note: replayed bubble] in bench/bench_parallel.cc). The chunk form is the
//   instruction form with every micro-batch's entry equal.
// - Errors: the structure checks of ValidateScheduleStructure; InvalidArgument when the costs
//   do not have one (finite, non-negative) entry per chunk (per chunk and micro-batch for
//   InstructionCosts, naming the first bad instruction); InvalidArgument naming each
//   rank's blocked instruction when the lists deadlock (every unfinished rank waits for an
//   instruction that cannot run first).
#pragma once

#include <vector>

#include "runtime/base/status.h"
#include "runtime/parallel/pipeline/pipeline_schedule.h"

namespace zs {

struct ChunkCosts {
  std::vector<double> forward;   // per model chunk, seconds (or any unit)
  std::vector<double> backward;  // per model chunk
  double transfer = 0;           // added to every dependency between two ranks

  static ChunkCosts Uniform(int chunks, double forward, double backward);
};

// Each instruction's own cost: forward[c * micro_batches + mb] for Forward(mb, c), backward
// the same for Backward(mb, c).
struct InstructionCosts {
  std::vector<double> forward;
  std::vector<double> backward;
  double transfer = 0;  // added to every dependency between two ranks

  // Every micro-batch of chunk c costs chunks.forward[c] / chunks.backward[c].
  static InstructionCosts FromChunks(const ChunkCosts& chunks, int micro_batches);
};

struct SimulatedInstruction {
  PipelineInstruction instruction;
  double start = 0;
  double end = 0;
};

struct ScheduleSimulation {
  std::vector<std::vector<SimulatedInstruction>> per_rank;  // in list order
  std::vector<double> busy;        // per rank: the sum of its instructions' costs
  std::vector<double> finish;      // per rank: the end of its last instruction
  std::vector<int> max_in_flight;  // per rank: MaxInFlight of its list
  double makespan = 0;
  double bubble_fraction = 0;  // 1 - sum(busy) / (ranks * makespan); 0 when makespan is 0
};

StatusOr<ScheduleSimulation> SimulateSchedule(const PipelineSchedule& schedule,
                                              const ChunkCosts& costs);
StatusOr<ScheduleSimulation> SimulateSchedule(const PipelineSchedule& schedule,
                                              const InstructionCosts& costs);

// The closed form of the bubble fraction with equal costs per chunk (any forward/backward
// ratio): (p-1)/(m+p-1) for GPipe and 1F1B; ((p-1)/v) / (m + (p-1)/v) for interleaved.
double IdealBubbleFraction(ScheduleKind kind, int ranks, int micro_batches, int virtual_stages = 1);

}  // namespace zs
