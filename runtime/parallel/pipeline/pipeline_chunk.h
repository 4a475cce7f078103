// PipelineChunk: the model behind a PipelineRunner. One object per model chunk held by this pp
// rank (a contiguous range of the model's units, stage_partition.h).
//
// Contract
// - The runner calls Forward and Backward from the thread that calls PipelineRunner::RunStep,
//   one call at a time, in the order of the rank's schedule: Forward(mb) before Backward(mb),
//   and for the schedules of pipeline_schedule.h each in micro-batch order.
// - Activations travel between chunks as fp32. input_elements() is the size of the activation
//   this chunk receives (and of the gradient it returns for it); output_elements() the size of
//   the activation it sends (and of the gradient it gets back). The first chunk of the model
//   reads its own data: its input_elements() must be 0 and it gets an empty `input` and
//   `input_grad`. The last chunk computes the loss: its output_elements() must be 0, it gets an
//   empty `output` and `output_grad`, and its Forward returns the micro-batch's loss (other
//   chunks return any value, e.g. 0; it is ignored). The runner checks at Create that chunk c's
//   output_elements() equals chunk c+1's input_elements() for every c, on every rank.
// - The spans are valid only during the call: a chunk keeps (copies) whatever its Backward needs
//   (its activations, keyed by micro_batch) and frees it there. Backward accumulates the
//   parameter gradients of the micro-batch into the chunk's own gradients (the runner knows no
//   parameters) and writes the gradient of its input to `input_grad`.
// - Forward-only passes (PipelineRunner::RunForwardOnly, an evaluation): the runner calls
//   ForwardOnly instead of Forward, and never Backward: the chunk computes the same output (and
//   the last chunk the same loss) but keeps nothing for a backward. The default refuses
//   (Unimplemented): a chunk that cannot tell the two apart must not be evaluated.
// - Errors: a non-OK Status stops the step; the runner returns it with the rank, the instruction
//   and the micro-batch as context. The chunk's state after an error is its own business; the
//   runner does not call it again (it is broken, pipeline_runner.h).
#pragma once

#include <cstdint>
#include <span>

#include "runtime/base/status.h"

namespace zs {

class PipelineChunk {
 public:
  virtual ~PipelineChunk() = default;

  virtual int64_t input_elements() const = 0;
  virtual int64_t output_elements() const = 0;

  virtual StatusOr<float> Forward(int micro_batch, std::span<const float> input,
                                  std::span<float> output) = 0;
  virtual Status Backward(int micro_batch, std::span<const float> output_grad,
                          std::span<float> input_grad) = 0;
  virtual StatusOr<float> ForwardOnly(int micro_batch, std::span<const float> input,
                                      std::span<float> output);
};

inline StatusOr<float> PipelineChunk::ForwardOnly(int, std::span<const float>, std::span<float>) {
  return UnimplementedError("this pipeline chunk has no forward-only pass (evaluation)");
}

}  // namespace zs
