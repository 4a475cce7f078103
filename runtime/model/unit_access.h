// UnitAccess: the hook surface between model code and whatever holds its parameters.
//
// Contract
// - Model code (runtime/nn, or a hand-written model: examples/wrap_custom_model.cc) never owns
//   its parameters. For every gather unit it brackets each use with Begin/End calls and reads
//   parameters and writes gradients only inside the bracket:
//
//       forward, each unit u in use order        backward, the reverse
//         BeginForward(u)                          BeginBackward(u)
//         ... Param(u, p) ...                      ... Param(u, p), Grad(u, p) += ...
//         EndForward(u)                            EndBackward(u)
//
//   Brackets of different units may nest (a tied weight: GPT's output projection reads the
//   embedding unit inside the head unit's bracket), and a unit may be bracketed several times
//   in one pass. A forward pass without a backward (evaluation) is for accesses that offer it
//   (ZeroEngine::BeginEvaluation; DenseUnitAccess needs none). A backward pass must bracket
//   each unit as many times as its forward did; the
//   unit's gradient is complete at its last EndBackward, which is where the ZeroEngine starts
//   reducing it (the rest of backward overlaps that communication).
// - Param(u, p) is the parameter's full value as fp32, row-major, numel() elements. With bf16
//   or fp16 compute these values are the low-precision parameters widened exactly (compute in
//   that precision with fp32 accumulation, as tensor cores do). Valid until the matching End.
// - Grad(u, p) is an fp32 buffer of numel() elements to accumulate (+=) d(loss)/d(param) into,
//   zeroed before the unit's first BeginBackward of each micro-batch. Valid until the matching
//   EndBackward. For a frozen parameter (ParamSpec::trainable false) it is scratch: what is
//   added is dropped, so model code may skip computing it. (A ZeroEngine with EngineParallelism::reduce_per_step zeroes it once per step
//   instead, so it may already hold earlier micro-batches' gradients: model code only ever adds
//   to it, and anything it must reduce itself, such as a replicated parameter's partial
//   gradient, it reduces from a buffer of its own before adding.)
// - SetMicroBatch(m): [Note: micro-batches in flight] a pipeline schedule runs the brackets of
//   several micro-batches interleaved (1F1B forwards micro-batch 2 before it runs micro-batch
//   0's backward), so "a unit's last EndBackward" needs the micro-batch it belongs to. Such a
//   caller names the micro-batch of the brackets that follow (0 <= m, distinct per micro-batch
//   within a step); the bracket rules above then hold per micro-batch, each (unit,
//   micro-batch) has its own Grad buffer, and its gradient is complete at that micro-batch's
//   last EndBackward on the unit. A caller that runs one micro-batch at a time never needs it.
//   The default ignores it (an access with nothing to reduce).
// - AllowsUnusedUnit(u): whether a micro-batch on this rank may leave unit u out altogether (no
//   bracket of it: conditional computation, LayerDrop), whatever the other ranks do. Model code
//   that may skip units checks it before opening any bracket. False unless the access says
//   otherwise (a ZeroEngine: with zerostack.allow_unused_units, at stage 3 for persistent units
//   only, [Note: unused units] in zero_engine.h).
// - backward_scale() is the value to seed backward with (d loss / d loss): the loss scale
//   divided by the number of micro-batches in the global batch, so that the reduced gradients
//   are those of the global mean loss.
// - Errors: every call returns a Status (a gather or a reduction can fail, e.g. a dead peer);
//   calling out of bracket order is a programming error caught by ZS_CHECK.
// - Threads: one thread per rank calls the model and these hooks.
#pragma once

#include <span>

#include "runtime/base/status.h"
#include "runtime/model/model_spec.h"

namespace zs {

class UnitAccess {
 public:
  virtual ~UnitAccess() = default;

  virtual const ModelSpec& model() const = 0;

  virtual Status BeginForward(int unit) = 0;
  virtual Status EndForward(int unit) = 0;
  virtual Status BeginBackward(int unit) = 0;
  virtual Status EndBackward(int unit) = 0;

  virtual std::span<const float> Param(int unit, int param) = 0;
  virtual std::span<float> Grad(int unit, int param) = 0;

  virtual void SetMicroBatch(int micro_batch) { (void)micro_batch; }

  virtual bool AllowsUnusedUnit(int unit) const {
    (void)unit;
    return false;
  }

  virtual float backward_scale() const = 0;
};

}  // namespace zs
