// Gpt: a GPT-2 style decoder (token + position embeddings, pre-LN blocks, final LayerNorm,
// output projection tied to the token embedding) with explicit forward and backward on the CPU.
//
// Contract
// - Gather units (ModelSpec from spec()):
//     unit 0        "embed"   {wte.weight [V, H], wpe.weight [T, H]}
//     units 1..L    "block.i" (i = 0..L-1) the 12 parameters of TransformerBlock, in its order
//     unit L+1      "head"    {ln_f.weight [H], ln_f.bias [H]}
//   Logits are x wte^T (no bias): the head reads unit 0 inside its own bracket.
// - Bracket order of one ForwardBackward (Forward does the first half only):
//     F(0)  F(1) .. F(L)  F(L+1){F(0)}    then    B(L+1){B(0)}  B(L) .. B(1)  B(0)
//   where F(u) is BeginForward(u) .. EndForward(u), B likewise, and {..} nests inside. Unit 0 is
//   bracketed twice in each pass; its gradient gets both contributions and is complete at its
//   second EndBackward (the last call of the pass).
// - [Note: LayerDrop] With GptConfig::layer_drop = p > 0 (Fan et al. 2019, "Reducing
//   Transformer Depth on Demand with Structured Dropout"), ForwardBackward skips block l of a
//   micro-batch (the identity: its output is its input, its gradient passes through, and its
//   unit gets no bracket at all) when DropsBlock(key, l): a hash of (layer_drop_seed, step,
//   micro-batch, rank, l) falls below p. Deterministic, so a run replays, and a reference can
//   ask which blocks a rank dropped. The surviving blocks are not rescaled (LayerDrop, unlike
//   dropout, trains the model to run shallower; evaluation runs every block). Forward (the
//   evaluation pass) never drops. A dropped unit has no bracket, which a UnitAccess must allow
//   for every block (UnitAccess::AllowsUnusedUnit; a ZeroEngine with
//   zerostack.allow_unused_units, at stage 3 with persistent blocks, since ranks drop different
//   blocks): ForwardBackward with p > 0 on one that does not is FailedPrecondition naming the
//   block and the keys, before any bracket (whatever the draws, so every rank fails alike).
// - Init(seed) is GPT-2's initialisation: normal(0, 0.02) for weights and embeddings, residual
//   projections (attn.proj.weight, mlp.proj.weight) normal(0, 0.02 / sqrt(2L)), zero biases,
//   LayerNorm gains one. Values depend only on (seed, unit, param) (FillNormal).
// - Owns no parameters (they are read through the UnitAccess). Owns the activations of the
//   last forward until the next one; with a MemoryTracker they are recorded as
//   (kHost, kActivations) bytes, updated after each pass and removed by the destructor.
// - Errors: InvalidArgument for a bad config, for tokens/targets whose size is not batch * seq,
//   seq outside [1, max_seq], a token or target outside [0, vocab), or a UnitAccess whose
//   model() does not have this spec's shapes. Errors from the hooks are returned as they are
//   (brackets then may be left open). Inputs are checked before any bracket opens.
// - Threads: one thread at a time per object (one Gpt per rank).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/device/memory_tracker.h"
#include "runtime/device/tracked_bytes.h"
#include "runtime/model/model_spec.h"
#include "runtime/model/unit_access.h"
#include "runtime/nn/embedding.h"
#include "runtime/nn/layer_norm.h"
#include "runtime/nn/param_init.h"
#include "runtime/nn/transformer_block.h"

namespace zs::nn {

struct GptConfig {
  int64_t vocab = 0;    // V
  int64_t max_seq = 0;  // T: positions in wpe
  int layers = 0;       // L
  int64_t hidden = 0;   // H
  int64_t heads = 0;    // A; H % A == 0
  // [Note: LayerDrop]: the probability in [0, 1) that training skips a block; 0 never does.
  double layer_drop = 0.0;
  uint64_t layer_drop_seed = 0;
  // InvalidArgument naming the field for a non-positive size, hidden % heads != 0 or a
  // layer_drop outside [0, 1).
  Status Validate() const;
};

// Which micro-batch a ForwardBackward is ([Note: LayerDrop]): the optimizer step, the
// micro-batch within it and the data-parallel rank.
struct LayerDropKey {
  int64_t step = 0;
  int64_t micro_batch = 0;
  int64_t rank = 0;
};

class Gpt {
 public:
  static constexpr float kInitStd = 0.02f;

  static StatusOr<std::unique_ptr<Gpt>> Create(const GptConfig& config,
                                               MemoryTracker* tracker = nullptr);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return config_; }
  const ModelSpec& spec() const { return spec_; }
  ParamInit Init(uint64_t seed) const;

  static constexpr int kEmbedUnit = 0;
  int block_unit(int layer) const { return 1 + layer; }
  int head_unit() const { return config_.layers + 1; }

  // tokens, targets: int32 [batch, seq], row-major. Runs forward, the mean cross-entropy loss
  // and backward seeded with access.backward_scale(); returns the mean loss. `drop` names the
  // micro-batch for LayerDrop (unused when layer_drop is 0).
  StatusOr<float> ForwardBackward(UnitAccess& access, std::span<const int32_t> tokens,
                                  std::span<const int32_t> targets, int64_t batch, int64_t seq,
                                  const LayerDropKey& drop = {});
  // Forward and loss only (eval); no backward brackets.
  StatusOr<float> Forward(UnitAccess& access, std::span<const int32_t> tokens,
                          std::span<const int32_t> targets, int64_t batch, int64_t seq);

  // After Forward: softmax(logits) [batch * seq, vocab] (e.g. to sample). After
  // ForwardBackward the same buffer holds d(objective)/d(logits) instead.
  std::span<const float> probabilities() const { return logits_; }

  // [Note: LayerDrop]: whether ForwardBackward with `key` skips block `layer` (false when
  // layer_drop is 0).
  bool DropsBlock(const LayerDropKey& key, int layer) const;

  // Bytes of activations and scratch this object holds now.
  int64_t activation_bytes() const;

 private:
  Gpt(const GptConfig& config, MemoryTracker* tracker);
  Status CheckInputs(const UnitAccess& access, std::span<const int32_t> tokens,
                     std::span<const int32_t> targets, int64_t batch, int64_t seq) const;
  // `drop`: LayerDrop's key in training, null in evaluation (no block dropped).
  StatusOr<float> RunForward(UnitAccess& access, std::span<const int32_t> tokens,
                             std::span<const int32_t> targets, int64_t batch, int64_t seq,
                             const LayerDropKey* drop);
  Status RunBackward(UnitAccess& access);
  void UpdateTracker();

  GptConfig config_;
  TrackedBytes tracked_;  // activation_bytes() in the tracker (kHost, kActivations)
  ModelSpec spec_;
  std::vector<std::vector<InitKind>> init_;  // [unit][param]
  Embedding wte_;
  Embedding wpe_;
  std::vector<TransformerBlock> blocks_;
  LayerNorm ln_f_;

  // Activations of the last forward.
  int64_t rows_ = 0;
  std::vector<int32_t> tokens_, targets_, positions_;
  std::vector<std::vector<float>> x_;  // x_[l]: input of block l; x_[L]: input of ln_f
  std::vector<bool> dropped_;          // [Note: LayerDrop]: blocks the last forward skipped
  std::vector<float> xf_, ln_f_mean_, ln_f_rstd_;
  std::vector<float> logits_;       // logits, then probabilities, then their gradient
  std::vector<float> dx_a_, dx_b_;  // backward scratch [rows, H]
};

}  // namespace zs::nn
