// TpBlockMlp: the seam where a transformer block (tp_transformer_block.h) takes its MLP branch,
// y = mlp(ln2(x1)). TpMlp (tp_mlp.h, dense, split over tp) implements it here; other MLPs
// (runtime/parallel/gpt/moe_block_mlp.h: a mixture of experts) implement it in the layer that
// composes them with the block, so the tensor-parallel layers know of no other kind.
//
// Contract
// - Immutable after creation; a block holds it shared, so copies of a block share one MLP.
// - Parameters: num_params() of the block's unit, right after ln2 (none for an MLP whose
//   parameters form a unit of their own: the caller then holds that unit's bracket too), read
//   inside the caller's bracket as the block's own.
// - Activations: each micro-batch's live in a TpBlockMlpActivations that NewActivations() made
//   (the block keeps it in TpBlockActivations::mlp). Forward fills it; Backward takes the same
//   x and the filled activations, writes dx (overwrites) and accumulates (+=) the gradients. An
//   implementation checks (ZS_CHECK) that it got activations of its own kind.
// - x, y, dy, dx [local_rows, H] (tp_options.h); rows = batch * seq, the full row count. The
//   collectives work in the caller's TpScratch. Blocks the calling thread in its collectives;
//   every tp rank calls in the same order. Communicator errors are returned.
// - One virtual call per block and pass: no virtual call inside a layer's loops.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/base/check.h"
#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/unit_access.h"
#include "runtime/parallel/tensor/tp_param_layout.h"
#include "runtime/parallel/tensor/tp_scratch.h"

namespace zs::tp {

// What one micro-batch's MLP branch keeps from Forward to Backward; each TpBlockMlp derives its
// own.
class TpBlockMlpActivations {
 public:
  virtual ~TpBlockMlpActivations() = default;
  virtual int64_t bytes() const = 0;  // what its vectors hold
};

class TpBlockMlp {
 public:
  virtual ~TpBlockMlp() = default;

  virtual int num_params() const = 0;
  virtual std::vector<TpModuleParam> params(std::string_view prefix) const = 0;
  virtual std::unique_ptr<TpBlockMlpActivations> NewActivations() const = 0;

  virtual Status Forward(UnitAccess& access, Communicator& tp, const float* x, int64_t rows,
                         TpBlockMlpActivations& act, TpScratch& scratch, float* y) const = 0;
  virtual Status Backward(UnitAccess& access, Communicator& tp, const float* x, const float* dy,
                          TpBlockMlpActivations& act, TpScratch& scratch, float* dx) const = 0;
};

// `act` as the activations of the MLP kind A (ZS_CHECK: `who` got another kind's).
template <class A>
A& ActivationsAs(TpBlockMlpActivations& act, const char* who) {
  A* a = dynamic_cast<A*>(&act);
  ZS_CHECK(a != nullptr, "{}: the activations are another MLP's", who);
  return *a;
}

}  // namespace zs::tp
