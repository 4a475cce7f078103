// PipelineRunner: executes one pp rank's part of a PipelineSchedule, step after step, over the
// pp communicator, with the model behind PipelineChunk (pipeline_chunk.h).
//
// Contract
// - Create is collective over `pp` (every rank of the pp group calls it with the same schedule,
//   in the same order relative to the group's other collectives). It validates the schedule
//   (ValidateSchedule), all-gathers every chunk's activation sizes and checks them across each
//   chunk boundary (so every rank fails alike, naming the chunks and sizes), then splits the
//   link communicators (pipeline_links.h). `pp` must outlive the runner; the chunks are borrowed
//   and must outlive it too. chunks[j] is the chunk of local index j: model chunk j * p + rank.
// - RunStep runs every instruction of this rank's list in order on the calling thread and
//   blocks until all of them ran and every send it started has completed. Activations
//   and gradients travel as fp32 (DType::kF32) with Send/Recv; a chunk on the same rank as its
//   neighbour (p = 1) gets its input handed over in memory. It returns the last chunk's loss
//   per micro-batch on the rank that holds the last chunk (empty elsewhere) and when each
//   instruction's Forward/Backward ran.
// - RunForwardOnly(m) runs a forward-only pass (an evaluation) of m micro-batches over the same
//   chunks and links: BuildForwardOnlySchedule's list, ForwardOnly on every chunk, only
//   activations on the wire. It is collective over the pp group like RunStep (every rank passes
//   the same m), may come between any two steps, and fails and breaks the runner as RunStep
//   does. The pass's schedule is built and validated on first use of each m.
// - One thread at a time calls a runner; RunStep blocks the host (on chunk compute and on
//   receives), nothing else.
//
// Why it cannot deadlock ([Note: pipeline deadlock freedom])
// 1. Every channel (activations to the next rank, activations from the previous rank, gradients
//    to the previous rank, gradients from the next rank) has a communicator of its own at this
//    rank (pipeline_links.h): an operation waits in a queue only behind operations of its own
//    channel, never behind another channel's receive.
// 2. Sends are started (asynchronously) right after the Forward/Backward that produced the data
//    and are only waited when they have completed (Test) or at the end of the step, so the
//    compute thread never blocks on a send, even if a send completes only once the receiver
//    posts its receive (rendezvous transports).
// 3. Receives are started in list order, at the latest just before the instruction that needs
//    them, and are the only thing the compute thread waits for mid-step. A channel's messages
//    are sent and received in the same order (ValidateSchedule), so the k-th receive matches the
//    k-th send and waits exactly for the instruction that produces its data.
// So a rank waits only for true data dependencies of the schedule, and ValidateSchedule proves
// by simulation that those cannot form a cycle. The 1F1B pattern (rank r sends activations
// forward while rank r+1 sends gradients back) and the interleaved ring (the last rank feeds
// rank 0) are both covered: the two directions and the wrap-around link never share a queue.
// The runner tests check this under the strictest semantics communicator.h allows (a send
// holds its queue until its receive is posted), where one shared communicator does deadlock.
//
// Errors and failure
// - A failing chunk call, send or receive stops the step: the runner waits for its operations
//   still in flight, then returns the first error with context "pipeline rank R, instruction I
//   (forward of micro-batch M, chunk C)". A peer's failure reaches this rank as a failed receive
//   (the peer's communicators are gone: Unavailable at once on the local backend) or, at the
//   latest, the communicator's timeout; it never hangs.
// - With recv_lookahead > 0 the receives posted ahead of an error are waited too, which can
//   take up to the communicator's timeout when the sender is itself stuck on this rank.
// - After an error the runner is broken: every later RunStep fails at once with kAborted naming
//   the first error (the chunks' activations and the links' order are no longer consistent).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/base/trace_recorder.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/memory_tracker.h"
#include "runtime/parallel/pipeline/pipeline_chunk.h"
#include "runtime/parallel/pipeline/pipeline_links.h"
#include "runtime/parallel/pipeline/pipeline_schedule.h"
#include "runtime/parallel/pipeline/send_buffers.h"

namespace zs {

struct PipelineRunnerOptions {
  // How many instructions ahead receives are posted: 0 posts each one just before it is
  // waited; k > 0 also posts those of the next k instructions, so transfers overlap compute
  // (at the cost of one buffer each and of slower failure, see above).
  int recv_lookahead = 0;
  // Where the message buffers (host tier, kActivations) are counted; may be null.
  MemoryTracker* tracker = nullptr;
  // May be null. Each instruction's Forward/Backward becomes a span on the track "pipeline"
  // (named by DescribeInstruction, args micro_batch and chunk), and each wait for its input a
  // span on "pipeline.wait": the gaps of the first track are the bubble, the second says which
  // transfer each gap waited for. Must outlive the runner.
  TraceRecorder* trace = nullptr;
};

// When one instruction's Forward/Backward ran, in seconds since the step's start.
struct InstructionTiming {
  PipelineInstruction instruction;
  double start_s = 0;
  double end_s = 0;
};

struct PipelineStepResult {
  // The last chunk's loss per micro-batch, on the rank holding the last chunk; else empty.
  std::vector<float> losses;
  std::chrono::steady_clock::time_point start;  // when RunStep began
  double wall_s = 0;                            // from start until every send completed
  std::vector<InstructionTiming> timings;       // in list order

  double busy_s() const;      // the sum of the instructions' durations
  double last_end_s() const;  // the end of the last instruction (0 without instructions)
};

// The measured bubble fraction of one step over all pp ranks, the simulator's quantity
// (schedule_simulator.h): 1 - sum(busy) / (ranks * makespan), with makespan from the earliest
// start to the latest last-instruction end. The results must share a clock (threads of one
// process or processes of one host); start the ranks together (a Barrier before RunStep).
double MeasuredBubbleFraction(std::span<const PipelineStepResult> ranks);

class PipelineRunner {
 public:
  static StatusOr<std::unique_ptr<PipelineRunner>> Create(Communicator& pp,
                                                          PipelineSchedule schedule,
                                                          std::vector<PipelineChunk*> chunks,
                                                          PipelineRunnerOptions options = {});
  ~PipelineRunner();
  PipelineRunner(const PipelineRunner&) = delete;
  PipelineRunner& operator=(const PipelineRunner&) = delete;

  StatusOr<PipelineStepResult> RunStep();
  StatusOr<PipelineStepResult> RunForwardOnly(int micro_batches);

  int rank() const { return rank_; }
  const PipelineSchedule& schedule() const { return schedule_; }
  // OK while healthy; the first error once broken.
  const Status& broken_status() const { return broken_; }

 private:
  class Step;  // one RunStep's in-flight state (pipeline_runner.cc)

  PipelineRunner(int rank, PipelineSchedule schedule, std::vector<PipelineChunk*> chunks,
                 PipelineLinks links, PipelineRunnerOptions options);
  StatusOr<PipelineStepResult> Run(const PipelineSchedule& schedule);


  const int rank_;
  const PipelineSchedule schedule_;
  const std::vector<PipelineChunk*> chunks_;  // by local index; borrowed
  PipelineLinks links_;
  const PipelineRunnerOptions options_;
  // Message buffers, reused across instructions and steps, and the sends in flight; counted in
  // options_.tracker (host, activations).
  SendBuffers buffers_;
  int trace_compute_ = -1;  // options_.trace's track ids ("pipeline", "pipeline.wait")
  int trace_wait_ = -1;
  PipelineSchedule forward_only_;  // the last RunForwardOnly's (forward_only false: none yet)
  Status broken_;
};

}  // namespace zs
