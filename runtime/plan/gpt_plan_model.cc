#include "runtime/plan/gpt_plan_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "runtime/parallel/expert/moe_config.h"
#include "runtime/parallel/expert/moe_mlp.h"
#include "runtime/parallel/pipeline/stage_partition.h"
#include "runtime/parallel/gpt/tp_gpt.h"
#include "runtime/plan/null_communicator.h"

namespace zs {
namespace {

constexpr int64_t kF = 4, kI = 4;  // bytes of a float and of an int32 the model code keeps

// TpBlockActivations::bytes() of one block (tp_transformer_block.cc, tp_attention.cc,
// tp_mlp.cc), rows = batch * seq; `backward`: with the backward scratch (scratch_b, dctx, dqkv,
// dprobs, dact) sized too. tp = 1 is nn::TransformerBlock's. With sequence parallelism the
// LayerNorm and residual regions hold this rank's row block only (rows / tp); attention and
// the MLP work on all rows of their width share, as without it.
// With experts (`moe` non-null) the MLP's buffers give way to the MoeActivations' (their most,
// [Note: activations counted as the model keeps them]), the same in forward and backward.
int64_t BlockBytes(int64_t batch, int64_t seq, int64_t hidden, int64_t heads, int tp,
                   bool sequence_parallel, bool backward, const int64_t* moe = nullptr) {
  const int64_t r = batch * seq, w = hidden / tp, a = heads / tp;
  const int64_t lr = sequence_parallel ? r / tp : r;    // rows of the LayerNorm regions
  int64_t floats = 4 * lr * hidden + 4 * lr;            // ln1_out, x1, ln2_out, scratch_a; stats
  floats += 3 * r * w + batch * a * seq * seq + r * w;  // qkv_out, probs, ctx
  if (moe == nullptr) floats += 2 * r * 4 * w;          // mlp pre, act
  if (backward) {
    floats += lr * hidden;                            // scratch_b
    floats += r * w + 3 * r * w + seq * seq;          // dctx, dqkv, dprobs
    if (moe == nullptr) floats += r * 4 * w;          // dact
  }
  return floats * kF + (moe != nullptr ? *moe : 0);
}

// TpScratch::bytes() of a rank's TpGpt once it has run a step: each buffer grows to its
// largest request ([Note: tp scratch grows to its largest request], tp_scratch.h), taken over
// the parts the rank runs (`embed`, `blocks`, `head`), forward and backward, as the tp layers
// request them (floats; r = batch * seq rows, all of them, also under sequence parallelism):
//   Full     sequence parallelism only: [r, H], the gathered input of a column-parallel layer
//            (qkv, fc, the head's projection; again in their backward), a row-parallel
//            output before its reduce-scatter (attention and MLP proj) or its gathered dy,
//            the embedding's lookups and gathered dy, and the experts' gathered input.
//   Partial  the embedding's backward: wpe's partial gradient [max_seq, H]; a block's
//            backward: a row-parallel bias [H], under sequence parallelism also a LayerNorm's
//            gain and bias [2H] and a column-parallel input gradient before its reduce-scatter
//            [r, H], and with experts over ep > 1 ranks the router's [E, H]; the head's
//            backward under sequence parallelism: [r, H] (the projection) and [2H] (ln_f).
//   Rows     experts under sequence parallelism at tp > 1 (they run on all rows): forward
//            their output [r, H], backward their output and input gradients [2r, H].
// max_seq is the sequence length (GptStages builds the model with max_seq = seq).
int64_t TpScratchBytes(const GptShape& s, const GridShape& g, bool embed, bool blocks, bool head) {
  const int64_t r = s.micro_batch * s.seq, h = s.hidden;
  const bool sp = g.sequence_parallel;
  int64_t full = 0, partial = 0, rows = 0;
  if (sp && (embed || blocks || head)) full = r * h;
  if (embed) partial = std::max(partial, s.seq * h);
  if (blocks) {
    partial = std::max(partial, sp ? std::max(r * h, 2 * h) : h);
    if (s.experts > 0 && g.ep > 1) partial = std::max(partial, int64_t(s.experts) * h);
    if (s.experts > 0 && sp && g.tp > 1) rows = 2 * r * h;
  }
  if (head && sp) partial = std::max(partial, std::max(r * h, 2 * h));
  return (full + partial + rows) * kF;
}

// The MoE layer's settings as TpGpt builds them (tp_gpt.cc: F = 4H).
MoeConfig MoeOf(const GptShape& s) {
  MoeConfig c;
  c.hidden = s.hidden;
  c.ffn = 4 * s.hidden;
  c.num_experts = s.experts;
  c.top_k = s.top_k;
  c.capacity_factor = s.capacity_factor;
  return c;
}

Status CheckShape(const GptShape& s, const GridShape& g) {
  auto positive = [](std::string_view what, int64_t v) -> Status {
    if (v <= 0) return InvalidArgumentError(fmt::format("{} {} must be positive", what, v));
    return OkStatus();
  };
  ZS_RETURN_IF_ERROR(positive("--layers", s.layers));
  ZS_RETURN_IF_ERROR(positive("--hidden", s.hidden));
  ZS_RETURN_IF_ERROR(positive("--heads", s.heads));
  ZS_RETURN_IF_ERROR(positive("--vocab", s.vocab));
  ZS_RETURN_IF_ERROR(positive("--seq", s.seq));
  ZS_RETURN_IF_ERROR(positive("--micro-batch", s.micro_batch));
  ZS_RETURN_IF_ERROR(positive("--tp", g.tp));
  ZS_RETURN_IF_ERROR(positive("--pp", g.pp));
  ZS_RETURN_IF_ERROR(positive("--dp", g.dp));
  if (s.hidden % s.heads != 0) {
    return InvalidArgumentError(
        fmt::format("--hidden {} is not a multiple of --heads {}", s.hidden, s.heads));
  }
  if (g.sequence_parallel && (s.micro_batch * s.seq) % g.tp != 0) {
    return InvalidArgumentError(fmt::format(
        "sequence parallelism: --micro-batch {} x --seq {} rows are not divisible by --tp {}",
        s.micro_batch, s.seq, g.tp));
  }
  if (s.heads % g.tp != 0) {
    return InvalidArgumentError(
        fmt::format("--heads {} is not divisible by --tp {}", s.heads, g.tp));
  }
  ZS_RETURN_IF_ERROR(positive("--virtual-stages", g.virtual_stages));
  // Experts, as GridGpt and MoeMlp refuse them, named by the flags.
  if (s.experts < 0) {
    return InvalidArgumentError(fmt::format("--experts {} must be >= 0", s.experts));
  }
  if (s.experts == 0 && g.ep != 1) {
    return InvalidArgumentError(fmt::format("--ep {} without --experts", g.ep));
  }
  if (s.experts > 0) {
    ZS_RETURN_IF_ERROR(positive("--ep", g.ep));
    if (g.dp % g.ep != 0) {
      return InvalidArgumentError(fmt::format(
          "--ep {} does not divide --dp {} (each data-parallel group is cut into groups of ep "
          "consecutive ranks)",
          g.ep, g.dp));
    }
    if (s.experts % g.ep != 0) {
      return InvalidArgumentError(
          fmt::format("--experts {} is not divisible by --ep {}", s.experts, g.ep));
    }
    if (s.top_k != 1 && s.top_k != 2) {
      return InvalidArgumentError(fmt::format("--top-k {} is not 1 or 2", s.top_k));
    }
    if (s.top_k > s.experts) {
      return InvalidArgumentError(
          fmt::format("--top-k {} is more than --experts {}", s.top_k, s.experts));
    }
    if (!(s.capacity_factor > 0) || !std::isfinite(s.capacity_factor)) {
      return InvalidArgumentError(
          fmt::format("--capacity-factor {} must be finite and > 0", s.capacity_factor));
    }
    ZS_RETURN_IF_ERROR(ValidateMoeConfig(MoeOf(s), g.ep));
  }
  if (g.pp > s.layers + 2) {
    return InvalidArgumentError(
        fmt::format("--pp {} is more than the {} pipeline segments (embed, --layers {}, head)",
                    g.pp, s.layers + 2, s.layers));
  }
  if (g.pp * g.virtual_stages > s.layers + 2) {
    return InvalidArgumentError(fmt::format(
        "--pp {} x --virtual-stages {} chunks are more than the {} pipeline segments (embed, "
        "--layers {}, head)",
        g.pp, g.virtual_stages, s.layers + 2, s.layers));
  }
  return OkStatus();
}

}  // namespace

int64_t GptExpertParameterCount(const GptShape& s) {
  const int64_t h = s.hidden;
  // Per layer: the router [E, H], then E experts of the MLP's 8 h^2 + 5 h.
  return s.experts > 0 ? int64_t(s.layers) * s.experts * (h + 8 * h * h + 5 * h) : 0;
}

int64_t GptParameterCount(const GptShape& s) {
  const int64_t h = s.hidden;
  const int64_t mlp = s.experts > 0 ? 0 : 8 * h * h + 5 * h;
  return s.vocab * h + s.seq * h + int64_t(s.layers) * (4 * h * h + 8 * h + mlp) + 2 * h +
         GptExpertParameterCount(s);
}

int64_t NnGptActivationBytes(const nn::GptConfig& c, int64_t batch, int64_t seq) {
  const int64_t r = batch * seq, h = c.hidden;
  int64_t bytes = 3 * r * kI;                               // tokens, targets, positions
  bytes += (int64_t(c.layers) + 1) * r * h * kF;            // x_: block inputs and ln_f's
  bytes += (r * h + 2 * r + r * c.vocab + 2 * r * h) * kF;  // xf, ln_f stats, logits, dx_a/b
  bytes += int64_t(c.layers) * BlockBytes(batch, seq, h, c.heads, 1, false, /*backward=*/true);
  return bytes;
}

double MegatronActivationBytes(const GptShape& s, const GridShape& g, bool recompute,
                               int micro_batches) {
  const double sbh = double(s.seq) * double(s.micro_batch) * double(s.hidden);
  const double per_layer =
      recompute ? 2.0 * sbh
                : sbh * (10.0 + 24.0 / g.tp +
                         5.0 * double(s.heads) * double(s.seq) / (double(s.hidden) * g.tp));
  const double layers_per_stage = double(s.layers) / g.pp;
  return per_layer * layers_per_stage * std::min(g.pp, micro_batches);
}

StatusOr<std::vector<StageModel>> GptStages(const GptShape& shape, const GridShape& grid,
                                            bool recompute, int micro_batches) {
  ZS_RETURN_IF_ERROR(CheckShape(shape, grid));
  if (micro_batches < 1) {
    return InvalidArgumentError(fmt::format("--micro-batches {} must be positive", micro_batches));
  }
  parallel::TpGptConfig config;
  config.gpt = nn::GptConfig{shape.vocab, shape.seq, shape.layers, shape.hidden, shape.heads};
  config.sequence_parallel = grid.sequence_parallel;
  const bool experts = shape.experts > 0;
  if (experts) {
    config.moe.experts = shape.experts;
    config.moe.top_k = shape.top_k;
    config.moe.capacity_factor = shape.capacity_factor;
  }
  NullCommunicator tp_comm(0, grid.tp, "tp");
  NullCommunicator ep_comm(0, grid.ep, "ep");
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<parallel::TpGpt> model,
                      parallel::TpGpt::Create(config, tp_comm, experts ? &ep_comm : nullptr));
  const ModelSpec& spec = model->spec();
  const std::vector<double> costs = model->SegmentCosts();
  ZS_ASSIGN_OR_RETURN(StagePartition partition,
                      PartitionVirtualStages(costs, grid.pp, grid.virtual_stages));
  ZS_ASSIGN_OR_RETURN(PipelineSchedule schedule,
                      BuildSchedule(grid.schedule, grid.pp, micro_batches, grid.virtual_stages));

  const int64_t B = shape.micro_batch, T = shape.seq, rows = B * T, H = shape.hidden;
  const int64_t local_rows = model->local_rows(rows);  // rows / tp with sequence parallelism
  const int64_t local_vocab = model->padded_vocab() / grid.tp;
  const bool sp = grid.sequence_parallel;
  // nn::Gpt only where train_gpt runs it (Args::grid()): experts, recompute, sequence
  // parallelism and any schedule but 1F1B run on GridGpt also at tp = pp = 1.
  const bool data_parallel_only = grid.tp == 1 && grid.pp == 1 && grid.virtual_stages == 1 &&
                                  grid.schedule == ScheduleKind::kOneFOneB && !recompute && !sp &&
                                  !experts;
  // One MoE layer's activations per micro-batch, at their most (all rows of the micro-batch).
  const int64_t moe_bytes =
      experts ? MoeActivations::BytesAfterForward(MoeOf(shape), rows,
                                                  MoeRowBound(MoeOf(shape), rows, grid.ep))
              : 0;
  const int64_t* moe = experts ? &moe_bytes : nullptr;
  const int embed = parallel::TpGpt::kEmbedUnit, head = model->head_unit();
  std::vector<StageModel> stages;
  for (int r = 0; r < grid.pp; ++r) {
    StageModel st;
    st.pp_rank = r;
    const std::vector<int> chunk_ids = partition.ChunksOfRank(r);
    std::map<int, int> local;  // model unit -> this stage's unit index
    for (int c : chunk_ids) {
      const ChunkUnits chunk = partition.chunks[size_t(c)];
      for (int seg = chunk.begin; seg < chunk.end; ++seg) {
        for (int u : model->SegmentUnits(seg)) {
          if (local.count(u)) continue;
          local[u] = int(st.units.size());
          PlanUnit pu{spec.units[size_t(u)].name, {}};
          for (const ParamSpec& p : spec.units[size_t(u)].params) {
            pu.param_sizes.push_back(p.numel());
          }
          // GridGpt's expert engine holds the layers' "block.i.moe" units.
          pu.expert = experts && seg >= 1 && seg <= shape.layers && u == model->moe_unit(seg - 1);
          st.units.push_back(std::move(pu));
        }
      }
    }
    const bool rank_has_embed = local.count(embed) > 0;  // the head reads wte in its bracket
    const bool rank_has_head = local.count(head) > 0;
    const bool rank_has_blocks = int(local.size()) > int(rank_has_embed) + int(rank_has_head);

    // One GptChunk per chunk of this rank: its layers, and what it keeps ([Note: activations
    // counted as the model keeps them]).
    struct ChunkModel {
      bool has_embed = false, has_head = false;
      int first_layer = 0, nb = 0;
      int64_t forward = 0;        // MicroBatchState::bytes() after a forward
      int64_t backward_adds = 0;  // what its backward adds to it
      int64_t fixed = 0;          // dx_a_, dx_b_ and the recompute scratch
    };
    std::vector<ChunkModel> chunks;
    std::string segments;
    for (int c : chunk_ids) {
      const ChunkUnits range = partition.chunks[size_t(c)];
      ChunkModel m;
      m.has_embed = range.begin == 0;
      m.has_head = range.end == model->num_segments();
      m.first_layer = std::max(range.begin, 1) - 1;
      for (int seg = range.begin; seg < range.end; ++seg) {
        if (seg >= 1 && seg <= shape.layers) ++m.nb;
      }
      m.forward = (int64_t(m.nb) + 1) * local_rows * H * kF;   // x
      if (m.has_embed || m.has_head) m.forward += rows * kI;   // targets
      if (m.has_embed) m.forward += (rows + local_rows) * kI;  // tokens, positions
      if (m.has_head) {  // targets; xf and ln_f's statistics; logits
        m.forward += rows * kI + (local_rows * H + 2 * local_rows + rows * local_vocab) * kF;
        m.backward_adds += local_rows * H * kF;  // dxf
      }
      const int64_t block_forward = BlockBytes(B, T, H, shape.heads, grid.tp, sp, false, moe);
      const int64_t block_backward = BlockBytes(B, T, H, shape.heads, grid.tp, sp, true, moe);
      if (!recompute) {
        m.forward += m.nb * block_forward;
        m.backward_adds += m.nb * (block_backward - block_forward);
      }
      m.fixed = 2 * local_rows * H * kF;         // dx_a_, dx_b_
      if (recompute) m.fixed += block_backward;  // scratch_
      segments +=
          fmt::format("{}[{}, {}): {}{} layer(s){}", segments.empty() ? "" : "; ", range.begin,
                      range.end, m.has_embed ? "embed, " : "", m.nb, m.has_head ? ", head" : "");
      chunks.push_back(m);
    }
    st.segments = fmt::format("segments {} of {}", segments, model->num_segments());

    // GptChunk::Forward / Backward's brackets of one micro-batch: through the chunks' forwards
    // in order, then their backwards from the last (a chunk holding the head runs its backward
    // first).
    auto bracket = [&](int unit, bool backward, bool begin) {
      st.order.push_back({local.at(unit), backward, begin});
    };
    auto layer_brackets = [&](const ChunkModel& m, bool backward) {
      for (int k = 0; k < m.nb; ++k) {
        const int i = backward ? m.nb - 1 - k : k;
        const std::vector<int> units = model->LayerUnits(m.first_layer + i);
        for (int u : units) bracket(u, backward, true);
        for (auto u = units.rbegin(); u != units.rend(); ++u) bracket(*u, backward, false);
      }
    };
    for (const ChunkModel& m : chunks) {
      if (m.has_embed) bracket(embed, false, true), bracket(embed, false, false);
      layer_brackets(m, false);
      if (m.has_head) {
        bracket(head, false, true);
        if (rank_has_embed) bracket(embed, false, true), bracket(embed, false, false);
        bracket(head, false, false);
      }
    }
    for (auto m = chunks.rbegin(); m != chunks.rend(); ++m) {
      if (m->has_head) {
        bracket(head, true, true);
        if (rank_has_embed) bracket(embed, true, true), bracket(embed, true, false);
        bracket(head, true, false);
      }
      layer_brackets(*m, true);
      if (m->has_embed) bracket(embed, true, true), bracket(embed, true, false);
    }

    // The rank's instruction list, walked: every forward adds its chunk's micro-batch state,
    // every backward holds it plus its backward scratch, then drops it. GptChunk::UpdateTracker
    // runs after each forward and after each backward's drop, so each chunk's tracked peak is
    // its own largest live state (plus its fixed buffers); GridGpt sums the chunks' peaks.
    std::vector<int64_t> live(chunks.size(), 0), chunk_peak(chunks.size(), 0);
    int64_t total = 0, joint_peak = 0, fixed = 0;
    int in_flight = 0;
    for (const PipelineInstruction& ins : schedule.per_rank[size_t(r)]) {
      const size_t j = size_t(schedule.LocalIndexOfChunk(ins.chunk));
      if (ins.op == PipelineOp::kForward) {
        live[j] += chunks[j].forward;
        total += chunks[j].forward;
        chunk_peak[j] = std::max(chunk_peak[j], live[j]);
        joint_peak = std::max(joint_peak, total);
        st.micro_batches_in_flight = std::max(st.micro_batches_in_flight, ++in_flight);
      } else {
        joint_peak = std::max(joint_peak, total + chunks[j].backward_adds);
        live[j] -= chunks[j].forward;
        total -= chunks[j].forward;
        --in_flight;
      }
    }
    // The TpGpt's collective scratch, one per rank whatever its chunks: at its full size from
    // the first step on, so in the tracked peaks and the real one alike.
    st.tp_scratch_bytes =
        TpScratchBytes(shape, grid, rank_has_embed, rank_has_blocks, rank_has_head);
    st.chunk_tracked_bytes = st.tp_scratch_bytes;
    for (size_t j = 0; j < chunks.size(); ++j) {
      st.chunk_tracked_bytes += chunk_peak[j] + chunks[j].fixed;
      fixed += chunks[j].fixed;
    }
    if (data_parallel_only) {
      st.activation_bytes = NnGptActivationBytes(config.gpt, B, T);
      st.chunk_tracked_bytes = st.activation_bytes;
      st.tp_scratch_bytes = 0;  // nn::Gpt: no TpGpt
    } else {
      // The real peak: every chunk's live state together, one backward's scratch, the fixed
      // buffers, the tp scratch, one pipeline message each way ([rows, H] floats), and under
      // pp > 1 the TiedEmbeddingLink's wte-sized buffers (the first stage sends the weights and
      // receives the gradient; the last receives the weights and sends the gradient).
      int64_t bytes = joint_peak + fixed + st.tp_scratch_bytes;
      if (grid.pp > 1) bytes += 2 * local_rows * H * kF;
      if (grid.pp > 1 && r == 0) bytes += 2 * local_vocab * H * kF;
      if (grid.pp > 1 && r == grid.pp - 1) bytes += 2 * local_vocab * H * kF;
      st.activation_bytes = bytes;
    }
    stages.push_back(std::move(st));
  }
  return stages;
}

}  // namespace zs
