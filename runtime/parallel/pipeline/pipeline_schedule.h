// PipelineSchedule: the ordered list of forward and backward instructions each pp rank runs in
// one training step. Pure values built by pure functions: no communication, no I/O.
//
// Contract
// - The model is cut into ranks * virtual_stages chunks (stage_partition.h); chunk c is held by
//   pp rank c % ranks. A step runs every micro-batch 0 .. micro_batches-1 through every chunk:
//   rank r's list holds Forward and Backward of (micro_batch, chunk) for each of its chunks,
//   each exactly once, in the order the rank executes them.
// - Communication is implied by the instructions, never listed: a Forward of chunk c > 0
//   receives its input activation from the rank of chunk c - 1, and a Forward of chunk c < last
//   sends its output to the rank of chunk c + 1; a Backward of chunk c < last receives the
//   gradient of its output from the rank of chunk c + 1, and a Backward of chunk c > 0 sends the
//   gradient of its input to the rank of chunk c - 1. The last chunk's Forward computes the loss;
//   its Backward starts from it.
// - Schedules (p = ranks, m = micro_batches, v = virtual_stages):
//   * GPipe: all forwards (micro-batch order), then all backwards (micro-batch order). v = 1.
//     Every rank holds up to m micro-batches' activations.
//   * 1F1B (PipeDream-Flush): rank r runs min(p - r - 1, m) warm-up forwards, then alternates
//     one forward and one backward, then the remaining backwards (cool-down). v = 1. At most
//     p - r micro-batches are in flight on rank r (forward done, backward not yet).
//   * Interleaved 1F1B (Megatron-LM's schedule with v virtual stages per rank): forwards run in
//     groups of p micro-batches through local chunk 0, then the same group through local chunk
//     1, ..., backwards likewise from the last local chunk; rank r warms up with
//     min(2 (p - r - 1) + (v - 1) p, m v) forwards. Needs m divisible by p (so every group is
//     full); otherwise InvalidArgument naming m, p and v.
//   With equal costs per chunk the idle share of the step is (p-1)/(m+p-1) for GPipe and 1F1B and
//   ((p-1)/v) / (m + (p-1)/v) for interleaved (schedule_simulator.h computes it).
// - Every schedule built here runs each chunk's forwards in micro-batch order and its backwards
//   in micro-batch order, so the messages between two ranks in one direction are sent and
//   received in the same order: the property PipelineRunner needs (ValidateSchedule checks it).
// - Forward-only schedules (BuildForwardOnlySchedule; an evaluation pass, no gradients) hold
//   Forward instructions only, each (micro-batch, chunk) exactly once: rank r runs the
//   micro-batches in groups of p, each group through its local chunk 0, then local chunk 1, ...
//   (the interleaved schedule's forward order without its backwards; with v = 1 simply
//   micro-batch order). Any m >= 1 works: the last group may be partial. The same message-order
//   and deadlock properties hold (ValidateSchedule checks them as for training schedules).
// - Copyable, immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace zs {

enum class PipelineOp : uint8_t { kForward = 0, kBackward };

struct PipelineInstruction {
  PipelineOp op = PipelineOp::kForward;
  int micro_batch = 0;
  int chunk = 0;  // the model chunk, 0 .. ranks * virtual_stages - 1 (not the local index)
  bool operator==(const PipelineInstruction&) const = default;
};
// "forward of micro-batch 3, chunk 1"
std::string DescribeInstruction(const PipelineInstruction& instruction);

enum class ScheduleKind : uint8_t { kGPipe = 0, kOneFOneB, kInterleaved };
std::string_view ScheduleKindName(ScheduleKind kind);  // "gpipe", "1f1b", "interleaved"
StatusOr<ScheduleKind> ParseScheduleKind(std::string_view name);

struct PipelineSchedule {
  ScheduleKind kind = ScheduleKind::kGPipe;
  int ranks = 1;
  int micro_batches = 1;
  int virtual_stages = 1;
  bool forward_only = false;  // an evaluation pass: Forward instructions only
  std::vector<std::vector<PipelineInstruction>> per_rank;  // indexed by pp rank

  int num_chunks() const { return ranks * virtual_stages; }
  int RankOfChunk(int chunk) const { return chunk % ranks; }
  int LocalIndexOfChunk(int chunk) const { return chunk / ranks; }
  bool IsFirstChunk(int chunk) const { return chunk == 0; }
  bool IsLastChunk(int chunk) const { return chunk == num_chunks() - 1; }
  // One line per rank: "rank 0: F0c0 F1c0 B0c0 ..." (F/B, micro-batch, chunk).
  std::string ToString() const;
};

// InvalidArgument (naming the values) for ranks < 1, micro_batches < 1, virtual_stages < 1,
// virtual_stages != 1 for GPipe and 1F1B, and micro_batches not divisible by ranks for
// interleaved.
StatusOr<PipelineSchedule> BuildSchedule(ScheduleKind kind, int ranks, int micro_batches,
                                         int virtual_stages = 1);

// The forward-only pass over the same chunks (see the contract): `ranks` x `virtual_stages`
// chunks, `micro_batches` micro-batches (any m >= 1, also for v > 1). `kind` is recorded for
// the messages only. InvalidArgument (naming the values) for sizes < 1.
StatusOr<PipelineSchedule> BuildForwardOnlySchedule(ScheduleKind kind, int ranks,
                                                    int micro_batches, int virtual_stages = 1);

// The structural checks, with InvalidArgument naming the rank and instruction: the sizes are
// >= 1 and per_rank has `ranks` lists; every instruction is in range and on the rank that holds
// its chunk; each (op, micro-batch, chunk) appears exactly once; each Forward precedes its
// Backward on its rank. A forward-only schedule holds no Backward (and needs none).
Status ValidateScheduleStructure(const PipelineSchedule& schedule);

// Everything PipelineRunner relies on: the structure as above; the messages from one rank to
// its neighbour in one direction are sent in the order the neighbour receives them (they match
// in start order: no tags); and the schedule cannot deadlock (it is simulated with unit costs:
// a cycle of ranks each waiting for a message the next has not sent is named).
Status ValidateSchedule(const PipelineSchedule& schedule);

// The largest number of (micro-batch, chunk) activations live at once in one rank's list:
// forwards done whose backward has not run yet.
int MaxInFlight(const std::vector<PipelineInstruction>& instructions);

}  // namespace zs
