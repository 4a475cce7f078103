// TpGpt: nn::Gpt with Megatron tensor parallelism over a tp communicator: vocabulary-parallel
// embedding and output projection (tied), vocabulary-parallel cross-entropy, attention heads and
// the MLP split over the group, optional sequence parallelism (tp_options.h).
//
// Contract
// - Gather units are exactly nn::Gpt's: the same units, names, parameter order and parameter
//   names, with this rank's local shapes and ParamSpec::tensor_parallel set per parameter
//   (with experts, each "block.i" loses its mlp.* and is followed by "block.i.moe": the
//   router, replicated, then this ep rank's experts, ParamSpec::expert_parallel; replicated
//   over tp, [Note: experts over tp] in moe_block_mlp.h; Init draws the experts by their
//   global index, so any ep size starts from the same model):
//     unit 0        "embed"   wte.weight [Vp/tp, H] (tp), wpe.weight [T, H] (replicated)
//     units 1..L    "block.i" ln1.* (repl.), attn.qkv.* [3H/tp, H], [3H/tp] (tp),
//                             attn.proj.weight [H, H/tp] (tp), attn.proj.bias (repl.), ln2.*
//                             (repl.), mlp.fc.* [4H/tp, H], [4H/tp] (tp), mlp.proj.weight
//                             [H, 4H/tp] (tp), mlp.proj.bias (repl.)
//     unit L+1      "head"    ln_f.weight, ln_f.bias (replicated)
//   Vp is V padded up to a multiple of tp; layout(u, p) says how each local parameter maps to
//   nn::Gpt's full one (tp_param_layout.h; qkv: this rank's heads of q, then of k, then of v).
// - Init(seed) gives this rank exactly its slice of nn::Gpt::Init(seed) (ShardInit: each full
//   parameter is computed with nn::Gpt's init and sliced; padded vocabulary rows are zero), so
//   TpGpt at any tp starts from the same model as nn::Gpt, and its loss and gradients (gathered
//   over tp) match nn::Gpt's up to float summation order.
// - The model's three parts; GptChunk (gpt_chunk.h) composes them, for a pipeline chunk or the
//   whole model as one chunk (RunWholeModel). Each part reads parameters inside the caller's
//   open bracket (forward bracket for Forward, backward bracket for Backward) of its unit,
//   keeps its activations only in the caller-owned activations object (so several micro-batches
//   may be in flight, and a recompute re-runs Forward into scratch activations before
//   Backward), and blocks in tp collectives: every tp rank makes the same calls in the same
//   order. The collectives' buffers are one TpScratch that this object owns (tp_scratch.h: dead
//   between calls), so the parts are const but one thread at a time.
//     embedding (unit 0):       tokens [batch*seq] -> x [local_rows, H]
//     block i (unit 1+i):       x -> y, both [local_rows, H]
//     head (unit L+1):          x [local_rows, H], targets [batch*seq] -> mean loss (the same
//                               on every tp rank). The tied output projection takes this
//                               rank's wte shard [Vp/tp, H] as `wte` and HeadBackward
//                               accumulates (+=) its gradient into `dwte`, so a pipeline's last
//                               stage may use a wte received from stage 0. HeadBackward seeds
//                               with access.backward_scale().
//   local_rows = batch * seq, or batch * seq / tp with sequence parallelism (this rank's
//   contiguous row block). Backward calls take the same x their Forward got; dx is
//   overwritten. Replicated parameters get the full gradient on every tp rank.
// - Memory: the TpScratch is counted in Create's `tracker` (host, activations) as it grows
//   (scratch_bytes(); it grows to the largest request of any part the rank runs and never
//   shrinks: [Note: tp scratch grows to its largest request] in tp_scratch.h). The activations
//   proper are the caller's objects, counted by their owner (GptChunk).
// - Errors: InvalidArgument for a bad config, heads (or the MLP width) not divisible by tp, and,
//   as nn::Gpt, bad tokens/targets, sizes, seq, or a UnitAccess of another model; with sequence
//   parallelism batch * seq not divisible by tp (CheckInputs says so before any bracket opens).
//   Communicator and hook errors are returned as they are (brackets may then be left open).
// - The tp communicator must outlive the model. One thread at a time per object (one TpGpt per
//   rank).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/memory_tracker.h"
#include "runtime/model/model_spec.h"
#include "runtime/model/unit_access.h"
#include "runtime/nn/gpt.h"
#include "runtime/parallel/tensor/tp_layer_norm.h"
#include "runtime/parallel/tensor/tp_options.h"
#include "runtime/parallel/tensor/tp_param_layout.h"
#include "runtime/parallel/tensor/tp_scratch.h"
#include "runtime/parallel/tensor/tp_transformer_block.h"
#include "runtime/parallel/tensor/vocab_parallel_cross_entropy.h"
#include "runtime/parallel/tensor/vocab_parallel_embedding.h"

namespace zs {
class MoeMlp;
}  // namespace zs

namespace zs::parallel {

class MoeBlockMlp;

// Experts in every block (runtime/parallel/expert): the MLP becomes a MoeMlp of `experts`
// experts, each GPT's MLP shape (F = 4H), over the ep communicator given to Create
// (moe_block_mlp.h).
struct TpMoeOptions {
  int experts = 0;  // 0: the dense GPT
  int top_k = 2;
  double capacity_factor = 1.25;
  float aux_loss_coef = 0.01f;
  bool enabled() const { return experts > 0; }
};

struct TpGptConfig {
  nn::GptConfig gpt;
  bool sequence_parallel = false;
  TpMoeOptions moe;
};

// The embedding part's activations (token and position embeddings).
struct TpEmbeddingActivations {
  int64_t batch = 0;
  int64_t seq = 0;
  std::vector<int32_t> tokens;     // [batch * seq]
  std::vector<int32_t> positions;  // [local_rows]
  int64_t bytes() const;
};

// The head part's activations (final LayerNorm, tied output projection, cross-entropy).
struct TpHeadActivations {
  int64_t rows = 0;
  std::vector<int32_t> targets;                 // [rows]
  std::vector<float> xf, ln_f_mean, ln_f_rstd;  // ln_f(x) [local_rows, H], [local_rows] x2
  std::vector<float> logits;  // [rows, Vp/tp]: logits, then probabilities, then their gradient
  std::vector<float> dxf;     // backward scratch [local_rows, H]
  int64_t bytes() const;
};

class TpGpt {
 public:
  // `ep` (borrowed; experts only; null = one rank holding every expert) must outlive the model;
  // so must `tracker` (may be null: the scratch is not recorded).
  static StatusOr<std::unique_ptr<TpGpt>> Create(const TpGptConfig& config, Communicator& tp,
                                                 Communicator* ep = nullptr,
                                                 MemoryTracker* tracker = nullptr);
  ~TpGpt();
  TpGpt(const TpGpt&) = delete;
  TpGpt& operator=(const TpGpt&) = delete;

  const TpGptConfig& config() const { return config_; }
  const tp::TpOptions& tp_options() const { return tp_options_; }
  const ModelSpec& spec() const { return spec_; }  // this rank's local shapes
  // nn::Gpt's (with experts: the dense model whose MLPs the experts replace).
  const ModelSpec& full_spec() const { return full_->spec(); }
  const tp::TpParamLayout& layout(int unit, int param) const;
  int64_t padded_vocab() const { return wte_.padded_vocab(); }
  tp::VocabShard vocab_shard() const;
  int64_t local_rows(int64_t rows) const { return tp_options_.local_rows(rows); }
  // The collectives' TpScratch now: its largest requests so far (counted in the tracker).
  int64_t scratch_bytes() const { return scratch_.bytes(); }

  ParamInit Init(uint64_t seed) const;
  // This rank's slices of the full parameters that full_init fills (for nn::Gpt's spec).
  ParamInit ShardInit(ParamInit full_init) const;

  static constexpr int kEmbedUnit = 0;
  bool has_experts() const { return config_.moe.enabled(); }
  int block_unit(int layer) const { return has_experts() ? 1 + 2 * layer : 1 + layer; }
  // Experts: unit "block.i.moe" (the router, then this ep rank's experts), right after
  // "block.i" (ln1, attn, ln2); -1 without experts.
  int moe_unit(int layer) const { return has_experts() ? 2 + 2 * layer : -1; }
  int head_unit() const { return int(spec_.units.size()) - 1; }
  // The units a layer's brackets cover: {block} or {block, moe}.
  std::vector<int> LayerUnits(int layer) const;
  // [Note: segments] What a pipeline chunk holds: segment 0 the embedding, 1..L the layers,
  // L+1 the head. SegmentUnits lists a segment's units; SegmentCosts the whole model's
  // parameter count per segment (every expert counted), the partitioner's default cost.
  int num_segments() const { return config_.gpt.layers + 2; }
  std::vector<int> SegmentUnits(int segment) const;
  std::vector<double> SegmentCosts() const;
  // Parameters of the whole model (every tp shard and every expert once).
  int64_t full_numel() const;

  // ---- the parts ----
  Status EmbeddingForward(UnitAccess& access, std::span<const int32_t> tokens, int64_t batch,
                          int64_t seq, TpEmbeddingActivations& act, std::span<float> x) const;
  Status EmbeddingBackward(UnitAccess& access, std::span<const float> dx,
                           TpEmbeddingActivations& act) const;
  Status BlockForward(int layer, UnitAccess& access, std::span<const float> x, int64_t batch,
                      int64_t seq, tp::TpBlockActivations& act, std::span<float> y) const;
  Status BlockBackward(int layer, UnitAccess& access, std::span<const float> x,
                       std::span<const float> dy, tp::TpBlockActivations& act,
                       std::span<float> dx) const;
  StatusOr<float> HeadForward(UnitAccess& access, std::span<const float> x,
                              std::span<const int32_t> targets, std::span<const float> wte,
                              TpHeadActivations& act) const;
  Status HeadBackward(UnitAccess& access, std::span<const float> x, std::span<const float> wte,
                      std::span<float> dwte, TpHeadActivations& act, std::span<float> dx) const;

  // InvalidArgument for tokens or targets that are not batch x seq ids in [0, vocab), seq
  // outside [1, max_seq], rows tp does not divide under sequence parallelism, or an `access`
  // of another model than this rank's TpGpt.
  Status CheckInputs(const UnitAccess& access, std::span<const int32_t> tokens,
                     std::span<const int32_t> targets, int64_t batch, int64_t seq) const;

 private:
  TpGpt(const TpGptConfig& config, Communicator& tp, std::unique_ptr<nn::Gpt> full,
        tp::VocabParallelEmbedding wte, std::vector<tp::TpTransformerBlock> blocks,
        std::vector<std::shared_ptr<const MoeBlockMlp>> moe_mlps, int ep_size,
        MemoryTracker* tracker);
  // Experts: layer `layer`'s MoeMlp.
  const MoeMlp& moe(int layer) const;
  Status CheckTokens(std::string_view what, std::span<const int32_t> ids, int64_t batch,
                     int64_t seq) const;
  Status CheckRows(std::string_view what, size_t floats, int64_t rows) const;

  TpGptConfig config_;
  Communicator& tp_;
  tp::TpOptions tp_options_;
  std::unique_ptr<nn::Gpt> full_;  // the unsplit model: its spec and Init
  ModelSpec spec_;
  std::vector<std::vector<tp::TpParamLayout>> layouts_;  // [unit][param]
  int ep_size_ = 1;
  tp::VocabParallelEmbedding wte_;
  std::vector<tp::TpTransformerBlock> blocks_;
  // Experts: blocks_[l]'s MLP branch, typed (shared with the block); empty for a dense model.
  std::vector<std::shared_ptr<const MoeBlockMlp>> moe_mlps_;
  tp::TpLayerNorm ln_f_;

  mutable tp::TpScratch scratch_;  // every part's collectives (contents dead between calls)
};

}  // namespace zs::parallel
