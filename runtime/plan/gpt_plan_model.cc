#include "runtime/plan/gpt_plan_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "runtime/parallel/pipeline/stage_partition.h"
#include "runtime/parallel/tensor/tp_gpt.h"
#include "runtime/plan/null_communicator.h"

namespace zs {
namespace {

constexpr int64_t kF = 4, kI = 4;  // bytes of a float and of an int32 the model code keeps

// TpBlockActivations::bytes() of one block (tp_transformer_block.cc, tp_attention.cc,
// tp_mlp.cc), rows = batch * seq (no sequence parallelism); `backward`: with the backward
// scratch (scratch_b, dctx, dqkv, dprobs, dact) sized too. tp = 1 is nn::TransformerBlock's.
int64_t BlockBytes(int64_t batch, int64_t seq, int64_t hidden, int64_t heads, int tp,
                   bool backward) {
  const int64_t r = batch * seq, w = hidden / tp, a = heads / tp;
  int64_t floats = 4 * r * hidden + 4 * r;              // ln1_out, x1, ln2_out, scratch_a; stats
  floats += 3 * r * w + batch * a * seq * seq + r * w;  // qkv_out, probs, ctx
  floats += 2 * r * 4 * w;                              // mlp pre, act
  if (backward) {
    floats += r * hidden;                     // scratch_b
    floats += r * w + 3 * r * w + seq * seq;  // dctx, dqkv, dprobs
    floats += r * 4 * w;                      // dact
  }
  return floats * kF;
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
  if (s.heads % g.tp != 0) {
    return InvalidArgumentError(
        fmt::format("--heads {} is not divisible by --tp {}", s.heads, g.tp));
  }
  if (g.pp > s.layers + 2) {
    return InvalidArgumentError(
        fmt::format("--pp {} is more than the {} pipeline segments (embed, --layers {}, head)",
                    g.pp, s.layers + 2, s.layers));
  }
  return OkStatus();
}

}  // namespace

int64_t GptParameterCount(const GptShape& s) {
  const int64_t h = s.hidden;
  return s.vocab * h + s.seq * h + int64_t(s.layers) * (12 * h * h + 13 * h) + 2 * h;
}

int64_t NnGptActivationBytes(const nn::GptConfig& c, int64_t batch, int64_t seq) {
  const int64_t r = batch * seq, h = c.hidden;
  int64_t bytes = 3 * r * kI;                               // tokens, targets, positions
  bytes += (int64_t(c.layers) + 1) * r * h * kF;            // x_: block inputs and ln_f's
  bytes += (r * h + 2 * r + r * c.vocab + 2 * r * h) * kF;  // xf, ln_f stats, logits, dx_a/b
  bytes += int64_t(c.layers) * BlockBytes(batch, seq, h, c.heads, 1, /*backward=*/true);
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
  tp::TpGptConfig config;
  config.gpt = nn::GptConfig{shape.vocab, shape.seq, shape.layers, shape.hidden, shape.heads};
  NullCommunicator tp_comm(0, grid.tp, "tp");
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<tp::TpGpt> model, tp::TpGpt::Create(config, tp_comm));
  const ModelSpec& spec = model->spec();
  const std::vector<double> costs = model->SegmentCosts();
  ZS_ASSIGN_OR_RETURN(StagePartition partition, PartitionStages(costs, grid.pp));

  const int64_t B = shape.micro_batch, T = shape.seq, rows = B * T, H = shape.hidden;
  const int64_t local_vocab = model->padded_vocab() / grid.tp;
  const bool data_parallel_only = grid.tp == 1 && grid.pp == 1 && !recompute;
  std::vector<StageModel> stages;
  for (int r = 0; r < grid.pp; ++r) {
    const ChunkUnits chunk = partition.chunks[size_t(r)];
    StageModel st;
    st.pp_rank = r;
    std::map<int, int> local;  // model unit -> this stage's unit index
    auto add_units = [&](int segment) {
      for (int u : model->SegmentUnits(segment)) {
        if (local.count(u)) continue;
        local[u] = int(st.units.size());
        PlanUnit pu{spec.units[size_t(u)].name, {}};
        for (const ParamSpec& p : spec.units[size_t(u)].params) pu.param_sizes.push_back(p.numel());
        st.units.push_back(std::move(pu));
      }
    };
    const bool has_embed = chunk.begin == 0, has_head = chunk.end == model->num_segments();
    int nb = 0;
    for (int s = chunk.begin; s < chunk.end; ++s) {
      add_units(s);
      if (s >= 1 && s <= shape.layers) ++nb;
    }
    // GptChunk::Forward / Backward's brackets.
    auto bracket = [&](int unit, bool backward, bool begin) {
      st.order.push_back({local.at(unit), backward, begin});
    };
    const int embed = tp::TpGpt::kEmbedUnit, head = model->head_unit();
    const int first_layer = std::max(chunk.begin, 1) - 1;
    if (has_embed) bracket(embed, false, true), bracket(embed, false, false);
    for (int i = 0; i < nb; ++i) {
      const std::vector<int> units = model->LayerUnits(first_layer + i);
      for (int u : units) bracket(u, false, true);
      for (auto u = units.rbegin(); u != units.rend(); ++u) bracket(*u, false, false);
    }
    if (has_head) {
      bracket(head, false, true);
      if (has_embed) bracket(embed, false, true), bracket(embed, false, false);
      bracket(head, false, false);
      bracket(head, true, true);
      if (has_embed) bracket(embed, true, true), bracket(embed, true, false);
      bracket(head, true, false);
    }
    for (int i = nb - 1; i >= 0; --i) {
      const std::vector<int> units = model->LayerUnits(first_layer + i);
      for (int u : units) bracket(u, true, true);
      for (auto u = units.rbegin(); u != units.rend(); ++u) bracket(*u, true, false);
    }
    if (has_embed) bracket(embed, true, true), bracket(embed, true, false);

    st.segments = fmt::format("segments [{}, {}) of {}: {}{} layer(s){}", chunk.begin, chunk.end,
                              model->num_segments(), has_embed ? "embed, " : "", nb,
                              has_head ? ", head" : "");
    st.micro_batches_in_flight = std::min(grid.pp - r, micro_batches);
    if (data_parallel_only) {
      st.activation_bytes = NnGptActivationBytes(config.gpt, B, T);
      st.chunk_tracked_bytes = st.activation_bytes;
    } else {
      // GptChunk::MicroBatchState::bytes() after its forward, and what its backward adds.
      int64_t forward = (int64_t(nb) + 1) * rows * H * kF;  // x
      if (has_embed || has_head) forward += rows * kI;      // targets
      if (has_embed) forward += 2 * rows * kI;              // tokens, positions
      int64_t backward_adds = 0;
      if (has_head) {
        forward += rows * kI + (rows * H + 2 * rows + rows * local_vocab) * kF;
        backward_adds += rows * H * kF;  // dxf
      }
      if (!recompute) {
        const int64_t fwd = BlockBytes(B, T, H, shape.heads, grid.tp, false);
        forward += nb * fwd;
        backward_adds += nb * (BlockBytes(B, T, H, shape.heads, grid.tp, true) - fwd);
      }
      // GptChunk::UpdateTracker runs after each forward and after each backward has dropped
      // its micro-batch: its peak is k forwards in flight plus the chunk's fixed buffers
      // (the recompute scratch block, dx_a_ and dx_b_).
      const int k = st.micro_batches_in_flight;
      int64_t fixed = 2 * rows * H * kF;                                        // dx_a_, dx_b_
      if (recompute) fixed += BlockBytes(B, T, H, shape.heads, grid.tp, true);  // scratch_
      st.chunk_tracked_bytes = int64_t(k) * forward + fixed;
      // The real peak also holds, during a backward, what it adds to its micro-batch, one
      // pipeline message each way ([rows, H] floats), and under pp > 1 the TiedEmbeddingLink's
      // wte-sized buffers (sent on the first stage; received, and the gradient sent, on the
      // last).
      int64_t bytes = st.chunk_tracked_bytes + backward_adds;
      if (grid.pp > 1) bytes += 2 * rows * H * kF;
      if (grid.pp > 1 && has_embed) bytes += local_vocab * H * kF;
      if (grid.pp > 1 && has_head) bytes += 2 * local_vocab * H * kF;
      st.activation_bytes = bytes;
    }
    stages.push_back(std::move(st));
  }
  return stages;
}

}  // namespace zs
