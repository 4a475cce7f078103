// GptPlanModel: what one rank of a GPT on a tp x pp x dp grid holds, as the planner needs it:
// its pipeline stage's units (tp-local shapes, from TpGpt's own spec), the bracket order of
// one micro-batch, and the bytes of activations the model keeps.
//
// Contract
// - Units and shapes come from the model code itself: TpGpt::Create over a NullCommunicator
//   of size tp (tp rank 0: replicated LayerNorm parameters and the padded vocabulary included),
//   cut into pp stages by PartitionStages over TpGpt::SegmentCosts (GridGpt's default partition
//   by parameter count). With experts, TpGpt gets a NullCommunicator of size ep as its ep
//   group (ep rank 0: every ep rank holds as many experts), so "block.i.moe" holds the router
//   and experts / ep experts, marked for the expert engine (GridGpt: sharded over dp / ep).
//   Nothing is allocated per element: a trillion-parameter GPT's stages are built in
//   milliseconds.
// - [Note: activations counted as the model keeps them] Activation bytes mirror the vectors the
//   model code sizes (a vector's capacity is what it was resized to):
//     data-parallel (tp = pp = 1, 1F1B, no recompute): nn::Gpt after ForwardBackward
//       (NnGptActivationBytes: per block ln1/ln2 outputs and statistics, x1, two scratch rows,
//       attention qkv, probabilities [B, A, T, T], context and their gradients, MLP pre/act/
//       dact [rows, 4H]; per model the block inputs, ln_f, logits [rows, V], two scratch rows);
//     grid (GptChunk, runtime/parallel/gpt): per micro-batch in flight its block inputs, each
//       block's TpBlockActivations (none with recompute: one scratch block instead), the
//       embedding's and the head's activations (logits [rows, Vp/tp]). The micro-batches in
//       flight come from walking the rank's instruction list of the grid's schedule
//       (pipeline_schedule.h: 1F1B keeps min(pp - stage, micro_batches), GPipe all of them,
//       interleaved up to its warm-up per chunk), chunk by chunk under virtual stages (a rank
//       holds `virtual_stages` GptChunks of PartitionVirtualStages' cut, each with its own
//       fixed buffers), one micro-batch at a time with its backward scratch; plus one pipeline
//       message each way and the tied-embedding link's wte-sized buffers under pp > 1.
//       With experts each block's TpBlockActivations keeps MoeActivations instead of the MLP's:
//       MoeActivations::BytesAfterForward at MoeRowBound's rows (moe_config.h: every expert
//       full to its capacity, the most the layer can hold; fewer rows when routing leaves
//       experts short), on all batch x seq rows of the micro-batch at any tp.
//       GptChunk reports to the tracker after each forward and after each backward has dropped
//       its micro-batch, so its tracked peak lacks the backward scratch: chunk_tracked_bytes is
//       the sum of the rank's chunks' own peaks (GridGpt::activation_peak_bytes), and
//       activation_bytes the real peak of all of them together. With sequence parallelism the
//       block inputs, the LayerNorm and residual regions and the head's ln_f hold this rank's
//       row block. Beside the chunks, the rank's one TpScratch (the tp layers' collective
//       buffers, owned by TpGpt and tracked as it grows: tp_scratch_bytes, TpScratchBytes in
//       gpt_plan_model.cc derives each buffer's largest request from the layers) counts in both
//       chunk_tracked_bytes (GridGpt::activation_peak_bytes includes it) and activation_bytes.
//   Megatron's formula (sbh(34 + 5as/h) bytes per layer, fp16) is printed beside it for
//   reference; our CPU model keeps fp32 activations and the full attention probabilities.
// - Errors: InvalidArgument naming the flag-level field and value (layers, hidden, heads,
//   vocab, seq, micro_batch, tp, pp, virtual stages) for non-positive sizes, rows (micro_batch x
//   seq) not divisible by tp under sequence parallelism, heads or 4H not
//   divisible by tp, more pipeline chunks (pp x virtual stages) than layers + 2 segments, and
//   the schedule's own refusals (BuildSchedule: virtual stages without the interleaved
//   schedule, interleaved micro-batches not a multiple of pp); with experts (as GridGpt and
//   MoeMlp refuse them): --experts negative, --ep without --experts, --ep not dividing --dp,
//   --experts not divisible by --ep, --top-k outside {1, 2} or above --experts, and
//   --capacity-factor not positive.
// - Threads: any.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/nn/gpt.h"
#include "runtime/parallel/pipeline/pipeline_schedule.h"
#include "runtime/plan/rank_memory_plan.h"

namespace zs {

struct GptShape {
  int layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t vocab = 0;
  int64_t seq = 0;          // sequence length (and positions in wpe)
  int64_t micro_batch = 1;  // sequences per micro-batch per dp rank
  // Mixture of experts (TpMoeOptions): `experts` experts of the MLP's shape replace every
  // block's MLP (0: dense), each token routed to top_k of them, each expert keeping at most
  // ExpertCapacity (moe_config.h) of a rank's tokens per micro-batch.
  int experts = 0;
  int top_k = 2;
  double capacity_factor = 1.25;
};

struct GridShape {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  // The pipeline schedule and its virtual stages (chunks per pp rank; interleaved only), as
  // GridGptOptions::schedule / virtual_stages.
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  int virtual_stages = 1;
  bool sequence_parallel = false;  // Megatron's, over the tp group (TpGptConfig)
  // Experts: the expert-parallel degree (GridGptOptions::ep): it divides dp; each rank holds
  // experts / ep experts, whose states its expert engine shards over dp / ep ranks.
  int ep = 1;
  int world() const { return tp * pp * dp; }
};

// One pipeline stage's rank (tp rank 0 of it).
struct StageModel {
  int pp_rank = 0;
  std::vector<PlanUnit> units;     // with experts, "block.i.moe" marked PlanUnit::expert
  std::vector<PlanBracket> order;  // one micro-batch
  int64_t activation_bytes = 0;    // what the model keeps at its peak
  // Of it, what the model code reports to the tracker (GridGpt::activation_peak_bytes: each
  // GptChunk's peak, its micro-batches after their forwards and its fixed buffers, summed, and
  // the TpScratch; nn::Gpt: everything).
  int64_t chunk_tracked_bytes = 0;
  // Of both: the TpGpt's TpScratch (TpGpt::scratch_bytes after a step; 0 for nn::Gpt).
  int64_t tp_scratch_bytes = 0;
  int micro_batches_in_flight = 1;  // at most, over the rank's chunks together
  std::string segments;  // "embed, block.0-block.11"
};

// The full model's parameter count (nn::Gpt's, tied embedding counted once; with experts every
// expert and the routers, TpGpt::full_numel()).
int64_t GptParameterCount(const GptShape& shape);
// Of it, the experts' and the routers' (0 for a dense GPT).
int64_t GptExpertParameterCount(const GptShape& shape);

// nn::Gpt::activation_bytes() after a ForwardBackward of `batch` x `seq`.
int64_t NnGptActivationBytes(const nn::GptConfig& config, int64_t batch, int64_t seq);

// Megatron-LM's activation estimate per rank (Korthikanti et al. 2022, no sequence parallelism):
// layers_per_stage * s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes, or 2*s*b*h per layer with full
// recompute, times the micro-batches in flight on the first stage.
double MegatronActivationBytes(const GptShape& shape, const GridShape& grid, bool recompute,
                               int micro_batches);

// Every pp stage of the grid (pp entries). `micro_batches` per step (>= 1).
StatusOr<std::vector<StageModel>> GptStages(const GptShape& shape, const GridShape& grid,
                                            bool recompute, int micro_batches);

}  // namespace zs
