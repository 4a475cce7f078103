#include "runtime/parallel/gpt/gpt_chunk.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/base/check.h"

namespace zs::parallel {

int64_t GptChunk::MicroBatchState::bytes() const {
  int64_t total = embed.bytes() + head.bytes() + int64_t(targets.capacity() * sizeof(int32_t));
  for (const std::vector<float>& v : x) total += int64_t(v.capacity() * sizeof(float));
  for (const tp::TpBlockActivations& b : blocks) total += b.bytes();
  return total;
}

GptChunk::GptChunk(const TpGpt& model, UnitAccess& access, GptChunkOptions options,
                   MicroBatchData data, TiedEmbeddingLink* tied, MemoryTracker* tracker)
    : model_(model),
      access_(access),
      options_(options),
      data_(std::move(data)),
      tied_(tied),
      tracked_(tracker, MemoryTier::kHost, MemoryCategory::kActivations),
      head_unit_(model.head_unit()),
      hidden_(model.config().gpt.hidden),
      local_rows_(model.local_rows(options.batch * options.seq)) {
  ZS_CHECK(
      options_.begin >= 0 && options_.begin < options_.end && options_.end <= model_.num_segments(),
      "GptChunk: segments [{}, {}) outside the model's {}", options_.begin, options_.end,
      model_.num_segments());
  ZS_CHECK(!has_head() || wte_in_access() || tied_ != nullptr,
           "GptChunk: a head without the embedding needs a TiedEmbeddingLink");
}

GptChunk::~GptChunk() {
  live_.clear();
  UpdateTracker();
}

int GptChunk::first_block() const { return std::max(options_.begin, 1) - 1; }
int GptChunk::num_blocks() const {
  const int first = std::max(options_.begin, 1);
  const int end = std::min(options_.end, model_.num_segments() - 1);
  return std::max(0, end - first);
}

int64_t GptChunk::input_elements() const { return has_embedding() ? 0 : local_rows_ * hidden_; }
int64_t GptChunk::output_elements() const { return has_head() ? 0 : local_rows_ * hidden_; }

void GptChunk::UpdateTracker() {
  int64_t in_flight = 0;
  for (const auto& [mb, state] : live_) in_flight += state.bytes();
  peak_micro_batch_bytes_ = std::max(peak_micro_batch_bytes_, in_flight);
  const int64_t now =
      in_flight + scratch_.bytes() + int64_t((dx_a_.capacity() + dx_b_.capacity()) * sizeof(float));
  tracked_.Set(now);
  peak_bytes_ = std::max(peak_bytes_, now);
}

StatusOr<float> GptChunk::Forward(int micro_batch, std::span<const float> input,
                                  std::span<float> output) {
  return RunForward(micro_batch, input, output, /*keep=*/true);
}

StatusOr<float> GptChunk::RunForward(int micro_batch, std::span<const float> input,
                                     std::span<float> output, bool keep) {
  // Without a backward to come (keep false) the blocks' activations go to the scratch, as with
  // recompute; the block inputs x stay (the chunk's output is the last of them).
  const bool block_scratch = options_.recompute || !keep;
  const int64_t B = options_.batch, T = options_.seq, rows = B * T;
  const int64_t width = local_rows_ * hidden_;
  ZS_CHECK(!live_.contains(micro_batch), "GptChunk: micro-batch {} forwarded twice", micro_batch);
  MicroBatchState& st = live_[micro_batch];
  access_.SetMicroBatch(micro_batch);
  const int nb = num_blocks();
  st.x.assign(size_t(nb + 1), {});
  for (auto& v : st.x) v.resize(size_t(width));
  if (!block_scratch) st.blocks.resize(size_t(nb));

  if (has_embedding() || has_head()) {
    tokens_.resize(size_t(rows));
    st.targets.resize(size_t(rows));
    ZS_RETURN_IF_ERROR(data_(micro_batch, tokens_, st.targets));
  }
  if (has_embedding()) {
    ZS_RETURN_IF_ERROR(access_.BeginForward(TpGpt::kEmbedUnit));
    if (micro_batch == 0 && tied_ != nullptr && tied_->is_first()) {
      ZS_RETURN_IF_ERROR(tied_->SendWeights(access_.Param(TpGpt::kEmbedUnit, 0)));
    }
    ZS_RETURN_IF_ERROR(model_.EmbeddingForward(access_, tokens_, B, T, st.embed, st.x[0]));
    ZS_RETURN_IF_ERROR(access_.EndForward(TpGpt::kEmbedUnit));
  } else {
    ZS_CHECK(int64_t(input.size()) == width, "GptChunk: input of {} floats, expected {}",
             input.size(), width);
    std::copy(input.begin(), input.end(), st.x[0].begin());
  }
  for (int i = 0; i < nb; ++i) {
    const int layer = first_block() + i;
    const std::vector<int> units = model_.LayerUnits(layer);
    for (int u : units) ZS_RETURN_IF_ERROR(access_.BeginForward(u));
    tp::TpBlockActivations& act = block_scratch ? scratch_ : st.blocks[size_t(i)];
    ZS_RETURN_IF_ERROR(
        model_.BlockForward(layer, access_, st.x[size_t(i)], B, T, act, st.x[size_t(i + 1)]));
    for (auto u = units.rbegin(); u != units.rend(); ++u)
      ZS_RETURN_IF_ERROR(access_.EndForward(*u));
  }
  float loss = 0.0f;
  if (has_head()) {
    ZS_RETURN_IF_ERROR(access_.BeginForward(head_unit_));
    if (wte_in_access()) {
      ZS_RETURN_IF_ERROR(access_.BeginForward(TpGpt::kEmbedUnit));  // tied projection
      ZS_ASSIGN_OR_RETURN(loss, model_.HeadForward(access_, st.x[size_t(nb)], st.targets,
                                                   access_.Param(TpGpt::kEmbedUnit, 0), st.head));
      ZS_RETURN_IF_ERROR(access_.EndForward(TpGpt::kEmbedUnit));
    } else {
      if (micro_batch == 0) {
        ZS_ASSIGN_OR_RETURN(remote_wte_, tied_->ReceiveWeights());
      }
      ZS_ASSIGN_OR_RETURN(
          loss, model_.HeadForward(access_, st.x[size_t(nb)], st.targets, remote_wte_, st.head));
    }
    ZS_RETURN_IF_ERROR(access_.EndForward(head_unit_));
  } else {
    ZS_CHECK(int64_t(output.size()) == width, "GptChunk: output of {} floats, expected {}",
             output.size(), width);
    std::copy(st.x[size_t(nb)].begin(), st.x[size_t(nb)].end(), output.begin());
  }
  UpdateTracker();
  return loss;
}

StatusOr<float> GptChunk::ForwardOnly(int micro_batch, std::span<const float> input,
                                      std::span<float> output) {
  StatusOr<float> loss = RunForward(micro_batch, input, output, /*keep=*/false);
  live_.erase(micro_batch);  // also after an error: nothing waits for a backward
  UpdateTracker();
  return loss;
}

Status GptChunk::Backward(int micro_batch, std::span<const float> output_grad,
                          std::span<float> input_grad) {
  auto it = live_.find(micro_batch);
  ZS_CHECK(it != live_.end(), "GptChunk: backward of micro-batch {} without its forward",
           micro_batch);
  MicroBatchState& st = it->second;
  access_.SetMicroBatch(micro_batch);
  const int64_t B = options_.batch, T = options_.seq;
  const int64_t width = local_rows_ * hidden_;
  const int nb = num_blocks();
  dx_a_.resize(size_t(width));
  dx_b_.resize(size_t(width));
  // dy: the gradient of the current activation; dx: where the next backward writes.
  std::span<float> dy(dx_a_), dx(dx_b_);
  if (has_head()) {
    ZS_RETURN_IF_ERROR(access_.BeginBackward(head_unit_));
    if (wte_in_access()) {
      ZS_RETURN_IF_ERROR(access_.BeginBackward(TpGpt::kEmbedUnit));
      ZS_RETURN_IF_ERROR(model_.HeadBackward(access_, st.x[size_t(nb)],
                                             access_.Param(TpGpt::kEmbedUnit, 0),
                                             access_.Grad(TpGpt::kEmbedUnit, 0), st.head, dy));
      ZS_RETURN_IF_ERROR(access_.EndBackward(TpGpt::kEmbedUnit));
    } else {
      std::span<float> dwte = tied_->GradBuffer();
      ZS_RETURN_IF_ERROR(
          model_.HeadBackward(access_, st.x[size_t(nb)], remote_wte_, dwte, st.head, dy));
      ZS_RETURN_IF_ERROR(tied_->SendGrad(micro_batch));
    }
    ZS_RETURN_IF_ERROR(access_.EndBackward(head_unit_));
  } else {
    ZS_CHECK(int64_t(output_grad.size()) == width, "GptChunk: output gradient of {} floats",
             output_grad.size());
    std::copy(output_grad.begin(), output_grad.end(), dy.begin());
  }
  for (int i = nb - 1; i >= 0; --i) {
    const int layer = first_block() + i;
    const std::vector<int> units = model_.LayerUnits(layer);
    for (int u : units) ZS_RETURN_IF_ERROR(access_.BeginBackward(u));
    tp::TpBlockActivations* act = &scratch_;
    if (options_.recompute) {
      // Re-run the block's forward from its kept input; y lands in dx (overwritten below).
      ZS_RETURN_IF_ERROR(model_.BlockForward(layer, access_, st.x[size_t(i)], B, T, scratch_,
                                             st.x[size_t(i + 1)]));
    } else {
      act = &st.blocks[size_t(i)];
    }
    ZS_RETURN_IF_ERROR(model_.BlockBackward(layer, access_, st.x[size_t(i)], dy, *act, dx));
    for (auto u = units.rbegin(); u != units.rend(); ++u) {
      ZS_RETURN_IF_ERROR(access_.EndBackward(*u));
    }
    std::swap(dy, dx);
  }
  if (has_embedding()) {
    ZS_RETURN_IF_ERROR(access_.BeginBackward(TpGpt::kEmbedUnit));
    if (tied_ != nullptr) {
      // The head's contribution first, as nn::Gpt accumulates it.
      ZS_RETURN_IF_ERROR(tied_->AddGradInto(micro_batch, access_.Grad(TpGpt::kEmbedUnit, 0)));
    }
    ZS_RETURN_IF_ERROR(model_.EmbeddingBackward(access_, dy, st.embed));
    ZS_RETURN_IF_ERROR(access_.EndBackward(TpGpt::kEmbedUnit));
  } else {
    ZS_CHECK(int64_t(input_grad.size()) == width, "GptChunk: input gradient of {} floats",
             input_grad.size());
    std::copy(dy.begin(), dy.end(), input_grad.begin());
  }
  live_.erase(it);
  UpdateTracker();
  return OkStatus();
}

namespace {

StatusOr<float> RunWholeModel(const TpGpt& model, UnitAccess& access,
                              std::span<const int32_t> tokens, std::span<const int32_t> targets,
                              int64_t batch, int64_t seq, bool backward, MemoryTracker* tracker) {
  ZS_RETURN_IF_ERROR(model.CheckInputs(access, tokens, targets, batch, seq));
  GptChunkOptions options;
  options.end = model.num_segments();
  options.batch = batch;
  options.seq = seq;
  MicroBatchData data = [&](int, std::span<int32_t> t, std::span<int32_t> y) {
    std::copy(tokens.begin(), tokens.end(), t.begin());
    std::copy(targets.begin(), targets.end(), y.begin());
    return OkStatus();
  };
  GptChunk chunk(model, access, options, std::move(data), /*tied=*/nullptr, tracker);
  if (!backward) return chunk.ForwardOnly(0, {}, {});
  ZS_ASSIGN_OR_RETURN(const float loss, chunk.Forward(0, {}, {}));
  ZS_RETURN_IF_ERROR(chunk.Backward(0, {}, {}));
  return loss;
}

}  // namespace

StatusOr<float> WholeModelForwardBackward(const TpGpt& model, UnitAccess& access,
                                          std::span<const int32_t> tokens,
                                          std::span<const int32_t> targets, int64_t batch,
                                          int64_t seq, MemoryTracker* tracker) {
  return RunWholeModel(model, access, tokens, targets, batch, seq, /*backward=*/true, tracker);
}

StatusOr<float> WholeModelForward(const TpGpt& model, UnitAccess& access,
                                  std::span<const int32_t> tokens, std::span<const int32_t> targets,
                                  int64_t batch, int64_t seq, MemoryTracker* tracker) {
  return RunWholeModel(model, access, tokens, targets, batch, seq, /*backward=*/false, tracker);
}

}  // namespace zs::parallel
