// ModelSpec: what a model tells the engine about its parameters, and nothing else.
//
// Contract
// - A model is a list of gather units; a unit is a list of parameters that are gathered,
//   released and reduced together (by default one module: one transformer block, the
//   embeddings). Units and parameters are named by their index in these lists; the names are
//   for errors, logs and reports.
// - A parameter's spec carries its metadata: its shape (row-major; numel is the product, a
//   scalar has shape {}), whether weight decay applies to it, the parameter group it steps
//   with, whether it is split over the tensor-parallel group and whether it trains at all
//   (STYLE rule 11: never inferred from its position or name).
// - ParamInit fills one parameter's full fp32 values. It must depend only on (unit, param) and
//   the model's own seed, never on the rank or the world size: every rank calls it and keeps
//   the part it owns, so sharded and unsharded runs start from the same bits.
// - Plain values; no threads, no ownership of memory.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace zs {

struct ParamSpec {
  std::string name;            // "attn.qkv.weight"
  std::vector<int64_t> shape;  // {3 * hidden, hidden}
  bool weight_decay = true;    // biases and norm gains usually set this false
  // The parameter group whose hyper-parameters it steps with (the config's
  // zerostack.param_groups, runtime/engine/param_group_config.h); "" = the default group.
  std::string group;
  // Tensor parallelism (runtime/parallel/tensor): true when each rank of the tp group holds a
  // different part of this parameter (a column- or row-parallel weight, a vocabulary shard), so
  // its squares are summed over the tp group in the global gradient norm; false when every tp
  // rank holds the same full value (LayerNorm gains, a row-parallel bias), so the norm counts it
  // once. Meaningless without tensor parallelism (tp size 1).
  bool tensor_parallel = false;
  // Expert parallelism (runtime/parallel/expert): true for an expert's parameter, held by one
  // rank of the ep group only (summed over the ep group in the norm); false for what every ep
  // rank holds alike (a router: counted once).
  bool expert_parallel = false;
  // false: a frozen parameter (PyTorch's requires_grad=False). Its value is used as usual but
  // never changes, and a ZeroEngine leaves it out of the gradient norm and the fp16 overflow
  // check ([Note: frozen units] in runtime/engine/zero_engine.h). In a unit whose parameters are
  // all frozen, the engine keeps no gradient, no optimizer state and no fp32 master for them; a
  // unit mixing frozen and trainable parameters (LoRA) keeps both over the whole unit, so give
  // frozen parameters a unit of their own to save that memory.
  bool trainable = true;
  int64_t numel() const;
};

struct UnitSpec {
  std::string name;  // "block.3"
  std::vector<ParamSpec> params;
  int64_t numel() const;  // sum of the parameters' numel
  // True when the unit has parameters and none of them is trainable.
  bool frozen() const;
};

struct ModelSpec {
  std::vector<UnitSpec> units;
  int64_t numel() const;  // every parameter of every unit, once
  // InvalidArgument naming the unit and parameter for a negative dimension, an empty unit
  // name, or a model without units.
  Status Validate() const;
  // The same units, each with the same number of parameters of the same shapes (names and
  // metadata aside): model code checks that a UnitAccess holds the model it was built for.
  bool SameShapes(const ModelSpec& other) const;
};

using ParamInit = std::function<void(int unit, int param, std::span<float> values)>;

}  // namespace zs
