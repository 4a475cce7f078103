// GptChunk: one pipeline chunk of a tensor-parallel GPT (TpGpt): a contiguous range of its
// units, run micro-batch by micro-batch by a PipelineRunner (pipeline_chunk.h) over this rank's
// engine. The one composition of TpGpt's parts: the whole model in one process is the chunk of
// every segment (WholeModelForwardBackward, WholeModelForward below).
//
// Contract
// - Segments [begin, end) of the TpGpt ([Note: segments] in tp_gpt.h): 0 the embedding, 1..L
//   the layers (a layer's units: its block, and with experts its "block.i.moe"), L+1 the head.
//   The chunk holding segment 0 is the model's first (it reads tokens from `data`,
//   input_elements() = 0); the chunk holding the head is the last (it reads targets and returns
//   the loss, output_elements() = 0). Between chunks the residual stream travels: local_rows x
//   hidden fp32 (local_rows = batch*seq, or batch*seq/tp with sequence parallelism).
// - Parameters are read through `access` (a SubsetUnitAccess over this pp rank's engine) with
//   TpGpt's brackets: F(u) around a unit's forward, B(u) around its backward. Forward and
//   Backward first name their micro-batch to it (UnitAccess::SetMicroBatch), so the engine
//   reduces a unit's gradient at that micro-batch's last backward on the unit although the
//   schedule interleaves micro-batches. The tied output
//   projection reads wte (unit 0) inside the head's bracket when this rank holds unit 0, as
//   TpGpt does (also when another chunk of this rank holds it: `wte_local`); otherwise `tied`
//   (tied_embedding_link.h) brings wte from the first stage once per step (micro-batch 0) and
//   takes each micro-batch's wte gradient back to it.
// - Activations: kept per micro-batch from Forward to Backward (the runner holds several in
//   flight under 1F1B). With `recompute`, a block keeps only its input and re-runs its forward
//   (inside its backward bracket) just before its backward, Megatron's full activation
//   recompute per unit: the stored activations of a block shrink to one [local_rows, H] tensor
//   at the price of one more forward. Bytes held are recorded in `tracker` (kHost,
//   kActivations) after every call; activation_bytes() and peak_activation_bytes() report them.
// - ForwardOnly (an evaluation pass, PipelineRunner::RunForwardOnly): Forward's computation and
//   loss, keeping nothing afterwards: the micro-batch's activations live only during the call.
//   The brackets are the same forward brackets (the engines are in an evaluation,
//   ZeroEngine::BeginEvaluation, so they stage nothing); the tied link sends and receives wte at
//   micro-batch 0 as in a step and carries no gradient.
// - `data` fills a micro-batch's tokens and targets (batch*seq each); called on the first and
//   the last chunk only. Borrowed: model, access, tied, tracker must outlive the chunk.
// - Errors: those of the hooks, the tp collectives, the link and `data`, returned as they are.
// - One thread at a time (the runner's).
// - WholeModelForwardBackward / WholeModelForward: nn::Gpt's ForwardBackward / Forward for a
//   TpGpt in one process: a chunk of every segment, one micro-batch (0), its brackets
//     F(0)  F(1) .. F(L)  F(L+1){F(0)}    then    B(L+1){B(0)}  B(L) .. B(1)  B(0)
//   (the head reads unit 0 inside its own bracket). The inputs are checked first
//   (TpGpt::CheckInputs: InvalidArgument, no bracket opened). Forward is an evaluation pass
//   (ForwardOnly). The activations live during the call only, in `tracker` as the chunk's.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "runtime/device/memory_tracker.h"
#include "runtime/device/tracked_bytes.h"
#include "runtime/model/unit_access.h"
#include "runtime/parallel/gpt/tied_embedding_link.h"
#include "runtime/parallel/gpt/tp_gpt.h"
#include "runtime/parallel/pipeline/pipeline_chunk.h"

namespace zs::parallel {

using MicroBatchData =
    std::function<Status(int micro_batch, std::span<int32_t> tokens, std::span<int32_t> targets)>;

struct GptChunkOptions {
  int begin = 0;  // segments [begin, end) of the TpGpt
  int end = 0;
  int64_t batch = 1;  // sequences per micro-batch on this dp rank
  int64_t seq = 1;
  bool recompute = false;
  // This rank also holds the embedding (unit 0), in another chunk of its own (one pp rank with
  // virtual stages): the head reads wte through the UnitAccess, nested in its bracket, instead
  // of through the TiedEmbeddingLink.
  bool wte_local = false;
};

class GptChunk final : public PipelineChunk {
 public:
  GptChunk(const TpGpt& model, UnitAccess& access, GptChunkOptions options, MicroBatchData data,
           TiedEmbeddingLink* tied, MemoryTracker* tracker);
  ~GptChunk() override;

  int64_t input_elements() const override;
  int64_t output_elements() const override;
  StatusOr<float> Forward(int micro_batch, std::span<const float> input,
                          std::span<float> output) override;
  Status Backward(int micro_batch, std::span<const float> output_grad,
                  std::span<float> input_grad) override;
  StatusOr<float> ForwardOnly(int micro_batch, std::span<const float> input,
                              std::span<float> output) override;

  bool has_embedding() const { return options_.begin == 0; }
  // The head reads wte through the UnitAccess (this rank holds unit 0).
  bool wte_in_access() const { return has_embedding() || options_.wte_local; }
  bool has_head() const { return options_.end == model_.num_segments(); }
  int64_t activation_bytes() const { return tracked_.current(); }
  int64_t peak_activation_bytes() const { return peak_bytes_; }
  // The peak of what the micro-batches in flight hold (their kept activations), without the
  // chunk's fixed scratch (the recompute activations and two backward buffers).
  int64_t peak_micro_batch_bytes() const { return peak_micro_batch_bytes_; }

 private:
  struct MicroBatchState {
    TpEmbeddingActivations embed;
    std::vector<std::vector<float>> x;           // x[i]: input of the chunk's i-th block / head
    std::vector<tp::TpBlockActivations> blocks;  // empty with recompute
    TpHeadActivations head;
    std::vector<int32_t> targets;
    int64_t bytes() const;
  };
  // Forward (keep: the activations stay for Backward) or ForwardOnly (they do not).
  StatusOr<float> RunForward(int micro_batch, std::span<const float> input, std::span<float> output,
                             bool keep);
  int first_block() const;  // the first layer index in the chunk
  int num_blocks() const;
  void UpdateTracker();

  const TpGpt& model_;
  UnitAccess& access_;
  const GptChunkOptions options_;
  MicroBatchData data_;
  TiedEmbeddingLink* tied_;
  TrackedBytes tracked_;  // what the chunk holds, in the tracker (kHost, kActivations)
  const int head_unit_;
  const int64_t hidden_;
  const int64_t local_rows_;
  std::map<int, MicroBatchState> live_;  // by micro-batch, Forward to Backward
  tp::TpBlockActivations scratch_;       // recompute
  std::span<const float> remote_wte_;    // the last stage's received wte (this step)
  std::vector<int32_t> tokens_;
  std::vector<float> dx_a_, dx_b_;
  int64_t peak_bytes_ = 0;
  int64_t peak_micro_batch_bytes_ = 0;
};

StatusOr<float> WholeModelForwardBackward(const TpGpt& model, UnitAccess& access,
                                          std::span<const int32_t> tokens,
                                          std::span<const int32_t> targets, int64_t batch,
                                          int64_t seq, MemoryTracker* tracker = nullptr);
StatusOr<float> WholeModelForward(const TpGpt& model, UnitAccess& access,
                                  std::span<const int32_t> tokens, std::span<const int32_t> targets,
                                  int64_t batch, int64_t seq, MemoryTracker* tracker = nullptr);

}  // namespace zs::parallel
