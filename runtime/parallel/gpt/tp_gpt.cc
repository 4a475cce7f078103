#include "runtime/parallel/gpt/tp_gpt.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/nn/embedding.h"
#include "runtime/parallel/gpt/moe_block_mlp.h"
#include "runtime/parallel/tensor/column_parallel_linear.h"
#include "runtime/parallel/tensor/mappings.h"

namespace zs::parallel {

using tp::ColumnParallelLinear;
using tp::TpBlockActivations;
using tp::TpLayerNorm;
using tp::TpModuleParam;
using tp::TpOptions;
using tp::TpParamLayout;
using tp::TpTransformerBlock;
using tp::VocabParallelEmbedding;
using tp::VocabShard;

int64_t TpEmbeddingActivations::bytes() const {
  return static_cast<int64_t>((tokens.capacity() + positions.capacity()) * sizeof(int32_t));
}

int64_t TpHeadActivations::bytes() const {
  size_t floats = 0;
  for (const std::vector<float>* v : {&xf, &ln_f_mean, &ln_f_rstd, &logits, &dxf}) {
    floats += v->capacity();
  }
  return static_cast<int64_t>(targets.capacity() * sizeof(int32_t) + floats * sizeof(float));
}

StatusOr<std::unique_ptr<TpGpt>> TpGpt::Create(const TpGptConfig& config, Communicator& tp,
                                               Communicator* ep, MemoryTracker* tracker) {
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<nn::Gpt> full, nn::Gpt::Create(config.gpt));
  const TpOptions options = TpOptions::Of(tp, config.sequence_parallel);
  ZS_RETURN_IF_ERROR(options.Validate());
  const nn::GptConfig& g = config.gpt;
  ZS_ASSIGN_OR_RETURN(VocabParallelEmbedding wte,
                      VocabParallelEmbedding::Create(kEmbedUnit, 0, g.vocab, g.hidden, options));
  std::vector<TpTransformerBlock> blocks;
  std::vector<std::shared_ptr<const MoeBlockMlp>> moe_mlps;
  MoeConfig moe;
  moe.hidden = g.hidden;
  moe.ffn = 4 * g.hidden;
  moe.num_experts = config.moe.experts;
  moe.top_k = config.moe.top_k;
  moe.capacity_factor = config.moe.capacity_factor;
  moe.aux_loss_coef = config.moe.aux_loss_coef;
  for (int l = 0; l < g.layers; ++l) {
    if (config.moe.enabled()) {
      ZS_ASSIGN_OR_RETURN(std::shared_ptr<const MoeBlockMlp> mlp,
                          MoeBlockMlp::Create(2 + 2 * l, moe, options, ep));
      moe_mlps.push_back(mlp);
      ZS_ASSIGN_OR_RETURN(TpTransformerBlock block,
                          TpTransformerBlock::CreateWithMlp(1 + 2 * l, 0, g.hidden, g.heads,
                                                            options, std::move(mlp)));
      blocks.push_back(std::move(block));
    } else {
      ZS_ASSIGN_OR_RETURN(TpTransformerBlock block,
                          TpTransformerBlock::Create(1 + l, 0, g.hidden, g.heads, options));
      blocks.push_back(std::move(block));
    }
  }
  const int ep_size = config.moe.enabled() && ep != nullptr ? ep->size() : 1;
  return std::unique_ptr<TpGpt>(new TpGpt(config, tp, std::move(full), std::move(wte),
                                          std::move(blocks), std::move(moe_mlps), ep_size,
                                          tracker));
}

TpGpt::TpGpt(const TpGptConfig& config, Communicator& tp, std::unique_ptr<nn::Gpt> full,
             VocabParallelEmbedding wte, std::vector<TpTransformerBlock> blocks,
             std::vector<std::shared_ptr<const MoeBlockMlp>> moe_mlps, int ep_size,
             MemoryTracker* tracker)
    : config_(config),
      tp_(tp),
      tp_options_(TpOptions::Of(tp, config.sequence_parallel)),
      full_(std::move(full)),
      wte_(std::move(wte)),
      blocks_(std::move(blocks)),
      moe_mlps_(std::move(moe_mlps)),
      ln_f_(config.moe.enabled() ? 2 * config.gpt.layers + 1 : config.gpt.layers + 1, 0,
            config.gpt.hidden, tp_options_),
      scratch_(tracker) {
  ep_size_ = ep_size;
  const nn::GptConfig& g = config.gpt;
  std::vector<std::pair<std::string, std::vector<TpModuleParam>>> units;
  std::vector<TpModuleParam> embed = wte_.params("wte.");
  const nn::ModuleParam wpe = nn::Embedding(kEmbedUnit, 1, g.max_seq, g.hidden).params("wpe.")[0];
  embed.push_back(
      MakeTpParam(wpe, TpParamLayout::Replicated({g.max_seq, g.hidden}), tp_options_.size));
  units.emplace_back("embed", std::move(embed));
  for (int l = 0; l < g.layers; ++l) {
    units.emplace_back(fmt::format("block.{}", l), blocks_[l].params(""));
    if (has_experts()) {
      std::vector<TpModuleParam> moe;
      for (const nn::ModuleParam& p : this->moe(l).params("moe.")) {
        TpModuleParam tp_param = MakeTpParam(p, TpParamLayout::Replicated(p.spec.shape), 1);
        // Everything but the router (param 0) is an expert's, held by one ep rank.
        tp_param.spec.expert_parallel = !moe.empty();
        moe.push_back(std::move(tp_param));
      }
      units.emplace_back(fmt::format("block.{}.moe", l), std::move(moe));
    }
  }
  units.emplace_back("head", ln_f_.params("ln_f."));
  for (auto& [name, params] : units) {
    UnitSpec unit{name, {}};
    std::vector<TpParamLayout> layouts;
    for (TpModuleParam& p : params) {
      unit.params.push_back(std::move(p.spec));
      layouts.push_back(std::move(p.layout));
    }
    spec_.units.push_back(std::move(unit));
    layouts_.push_back(std::move(layouts));
  }
  if (config.moe.enabled()) return;  // the experts replace nn::Gpt's MLPs: no mirror
  // The tp spec mirrors nn::Gpt's: same units, same parameter names in the same order.
  const ModelSpec& f = full_->spec();
  ZS_CHECK(f.units.size() == spec_.units.size(), "tp spec has {} units, nn {}", spec_.units.size(),
           f.units.size());
  for (size_t u = 0; u < f.units.size(); ++u) {
    ZS_CHECK(f.units[u].name == spec_.units[u].name &&
                 f.units[u].params.size() == spec_.units[u].params.size(),
             "tp unit {} differs from nn's", spec_.units[u].name);
    for (size_t p = 0; p < f.units[u].params.size(); ++p) {
      ZS_CHECK(f.units[u].params[p].name == spec_.units[u].params[p].name &&
                   f.units[u].params[p].shape == layouts_[u][p].full_shape,
               "tp parameter {} differs from nn's {}", spec_.units[u].params[p].name,
               f.units[u].params[p].name);
    }
  }
}

const MoeMlp& TpGpt::moe(int layer) const {
  ZS_CHECK(has_experts() && layer >= 0 && layer < int(moe_mlps_.size()),
           "TpGpt: no experts in layer {}", layer);
  return moe_mlps_[size_t(layer)]->moe();
}

std::vector<int> TpGpt::LayerUnits(int layer) const {
  ZS_CHECK(layer >= 0 && layer < config_.gpt.layers, "no layer {}", layer);
  if (has_experts()) return {block_unit(layer), moe_unit(layer)};
  return {block_unit(layer)};
}

std::vector<int> TpGpt::SegmentUnits(int segment) const {
  ZS_CHECK(segment >= 0 && segment < num_segments(), "no segment {}", segment);
  if (segment == 0) return {kEmbedUnit};
  if (segment == num_segments() - 1) return {head_unit()};
  return LayerUnits(segment - 1);
}

std::vector<double> TpGpt::SegmentCosts() const {
  std::vector<double> costs;
  for (int seg = 0; seg < num_segments(); ++seg) {
    double cost = 0;
    for (int u : SegmentUnits(seg)) {
      for (int p = 0; p < int(spec_.units[size_t(u)].params.size()); ++p) {
        const ParamSpec& ps = spec_.units[size_t(u)].params[size_t(p)];
        // The whole model's count: a tp shard times tp; an ep rank's experts times ep.
        double n = double(layouts_[size_t(u)][size_t(p)].full_numel());
        if (ps.expert_parallel) n *= ep_size_;
        cost += n;
      }
    }
    costs.push_back(cost);
  }
  return costs;
}

int64_t TpGpt::full_numel() const {
  double total = 0;
  for (double c : SegmentCosts()) total += c;
  return int64_t(total);
}

TpGpt::~TpGpt() = default;

const TpParamLayout& TpGpt::layout(int unit, int param) const {
  ZS_CHECK(unit >= 0 && unit < static_cast<int>(layouts_.size()) && param >= 0 &&
               param < static_cast<int>(layouts_[unit].size()),
           "TpGpt: no parameter ({}, {})", unit, param);
  return layouts_[unit][param];
}

VocabShard TpGpt::vocab_shard() const {
  return VocabShard::Of(config_.gpt.vocab, tp_options_.size, tp_options_.rank);
}

ParamInit TpGpt::Init(uint64_t seed) const {
  if (!has_experts()) return ShardInit(full_->Init(seed));
  // With experts, each dense unit takes nn::Gpt's values for the unit it stands for (a block
  // unit's parameters are nn's block's first ones), sliced for this tp rank, and each expert
  // unit draws its parameters by (layer, global parameter index), whatever the ep size, from
  // random streams of their own (kExpertInitStream + layer); they are replicated over tp.
  constexpr int kExpertInitStream = 1 << 20;  // above any nn::Gpt unit index
  struct Role {
    int nn_unit = -1;      // dense: nn::Gpt's unit
    int layer = -1;        // experts: the layer
    int first_expert = 0;  // experts: this ep rank's first global expert
  };
  std::vector<Role> roles(spec_.units.size());
  roles[kEmbedUnit].nn_unit = 0;
  roles[size_t(head_unit())].nn_unit = config_.gpt.layers + 1;
  for (int l = 0; l < config_.gpt.layers; ++l) {
    roles[size_t(block_unit(l))].nn_unit = 1 + l;
    roles[size_t(moe_unit(l))] = Role{-1, l, moe(l).first_expert()};
  }
  const float residual_std = nn::Gpt::kInitStd / std::sqrt(2.0f * float(config_.gpt.layers));
  return ShardInit([dense = full_->Init(seed), seed, roles, residual_std](int unit, int param,
                                                                          std::span<float> values) {
    const Role& role = roles[size_t(unit)];
    if (role.nn_unit >= 0) return dense(role.nn_unit, param, values);
    // MoeMlp's order: the router, then per local expert fc.weight, fc.bias, proj.weight,
    // proj.bias.
    if (param == 0) {
      return nn::FillNormal(seed, kExpertInitStream + role.layer, 0, nn::Gpt::kInitStd, values);
    }
    const int which = (param - 1) % 4;
    if (which == 1 || which == 3) {
      std::fill(values.begin(), values.end(), 0.0f);
      return;
    }
    const int global = 1 + 4 * role.first_expert + (param - 1);
    nn::FillNormal(seed, kExpertInitStream + role.layer, global,
                   which == 2 ? residual_std : nn::Gpt::kInitStd, values);
  });
}

ParamInit TpGpt::ShardInit(ParamInit full_init) const {
  return [layouts = layouts_, options = tp_options_, full_init = std::move(full_init)](
             int unit, int param, std::span<float> values) {
    ZS_CHECK(unit >= 0 && unit < static_cast<int>(layouts.size()) && param >= 0 &&
                 param < static_cast<int>(layouts[unit].size()),
             "TpGpt init: no parameter ({}, {})", unit, param);
    const TpParamLayout& layout = layouts[unit][param];
    std::vector<float> full(static_cast<size_t>(layout.full_numel()));
    full_init(unit, param, full);
    SliceFull(layout, options.rank, options.size, full, values);
  };
}

// ---- input checks ---------------------------------------------------------------------------

Status TpGpt::CheckTokens(std::string_view what, std::span<const int32_t> ids, int64_t batch,
                          int64_t seq) const {
  if (batch <= 0) return InvalidArgumentError(fmt::format("tp gpt: batch {} <= 0", batch));
  if (seq <= 0 || seq > config_.gpt.max_seq) {
    return InvalidArgumentError(
        fmt::format("tp gpt: seq {} is not in [1, max_seq {}]", seq, config_.gpt.max_seq));
  }
  if (static_cast<int64_t>(ids.size()) != batch * seq) {
    return InvalidArgumentError(fmt::format("tp gpt: {} {}s for batch {} x seq {} = {}", ids.size(),
                                            what, batch, seq, batch * seq));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= config_.gpt.vocab) {
      return InvalidArgumentError(fmt::format("tp gpt: {} {} at {} is not in [0, vocab {})", what,
                                              ids[i], i, config_.gpt.vocab));
    }
  }
  return tp_options_.CheckRows(batch * seq);
}

Status TpGpt::CheckRows(std::string_view what, size_t floats, int64_t rows) const {
  const int64_t expected = tp_options_.local_rows(rows) * config_.gpt.hidden;
  if (static_cast<int64_t>(floats) != expected) {
    return InvalidArgumentError(fmt::format(
        "tp gpt: {} has {} floats, not local rows {} x hidden {} = {} (rows {}, tp {}{})", what,
        floats, tp_options_.local_rows(rows), config_.gpt.hidden, expected, rows, tp_options_.size,
        tp_options_.sequence_parallel ? ", sequence parallel" : ""));
  }
  return OkStatus();
}

Status TpGpt::CheckInputs(const UnitAccess& access, std::span<const int32_t> tokens,
                          std::span<const int32_t> targets, int64_t batch, int64_t seq) const {
  ZS_RETURN_IF_ERROR(CheckTokens("token", tokens, batch, seq));
  ZS_RETURN_IF_ERROR(CheckTokens("target", targets, batch, seq));
  const ModelSpec& model = access.model();
  if (!model.SameShapes(spec_)) {
    return InvalidArgumentError(fmt::format(
        "tp gpt: the UnitAccess's model ({} units, {} values) is not this rank's TpGpt ({} "
        "units, {} values at tp {})",
        model.units.size(), model.numel(), spec_.units.size(), spec_.numel(), tp_options_.size));
  }
  return OkStatus();
}

// ---- the parts ------------------------------------------------------------------------------

Status TpGpt::EmbeddingForward(UnitAccess& access, std::span<const int32_t> tokens, int64_t batch,
                               int64_t seq, TpEmbeddingActivations& act, std::span<float> x) const {
  ZS_RETURN_IF_ERROR(CheckTokens("token", tokens, batch, seq));
  const int64_t rows = batch * seq, h = config_.gpt.hidden;
  ZS_RETURN_IF_ERROR(CheckRows("embedding output", x.size(), rows));
  const int64_t local = tp_options_.local_rows(rows), first = tp_options_.first_row(rows);
  act.batch = batch;
  act.seq = seq;
  act.tokens.assign(tokens.begin(), tokens.end());
  act.positions.resize(local);
  for (int64_t i = 0; i < local; ++i) act.positions[i] = static_cast<int32_t>((first + i) % seq);
  ZS_RETURN_IF_ERROR(wte_.Forward(access, tp_, act.tokens, scratch_, x.data()));
  const float* wpe = access.Param(kEmbedUnit, 1).data();
  for (int64_t i = 0; i < local; ++i) {
    const float* row = wpe + act.positions[i] * h;
    float* xi = x.data() + i * h;
    for (int64_t j = 0; j < h; ++j) xi[j] += row[j];
  }
  return OkStatus();
}

Status TpGpt::EmbeddingBackward(UnitAccess& access, std::span<const float> dx,
                                TpEmbeddingActivations& act) const {
  ZS_CHECK(act.batch > 0, "TpGpt::EmbeddingBackward before EmbeddingForward");
  const int64_t h = config_.gpt.hidden;
  ZS_RETURN_IF_ERROR(CheckRows("embedding gradient", dx.size(), act.batch * act.seq));
  ZS_RETURN_IF_ERROR(wte_.Backward(access, tp_, act.tokens, dx.data(), scratch_));
  const int64_t wpe_size = config_.gpt.max_seq * h;
  float* dwpe = scratch_.Partial(wpe_size);
  std::fill(dwpe, dwpe + wpe_size, 0.0f);
  for (size_t i = 0; i < act.positions.size(); ++i) {
    float* row = dwpe + act.positions[i] * h;
    const float* dxi = dx.data() + i * h;
    for (int64_t j = 0; j < h; ++j) row[j] += dxi[j];
  }
  return tp::AccumulateReplicatedGrads(tp_, tp_options_.sequence_parallel,
                                       std::span(dwpe, static_cast<size_t>(wpe_size)),
                                       {access.Grad(kEmbedUnit, 1)});
}

Status TpGpt::BlockForward(int layer, UnitAccess& access, std::span<const float> x, int64_t batch,
                           int64_t seq, TpBlockActivations& act, std::span<float> y) const {
  ZS_CHECK(layer >= 0 && layer < config_.gpt.layers, "no layer {}", layer);
  ZS_RETURN_IF_ERROR(tp_options_.CheckRows(batch * seq));
  ZS_RETURN_IF_ERROR(CheckRows("block input", x.size(), batch * seq));
  ZS_RETURN_IF_ERROR(CheckRows("block output", y.size(), batch * seq));
  return blocks_[layer].Forward(access, tp_, x.data(), batch, seq, act, scratch_, y.data());
}

Status TpGpt::BlockBackward(int layer, UnitAccess& access, std::span<const float> x,
                            std::span<const float> dy, TpBlockActivations& act,
                            std::span<float> dx) const {
  ZS_CHECK(layer >= 0 && layer < config_.gpt.layers, "no layer {}", layer);
  ZS_CHECK(act.batch > 0, "TpGpt::BlockBackward before BlockForward");
  const int64_t rows = act.batch * act.seq;
  ZS_RETURN_IF_ERROR(CheckRows("block input", x.size(), rows));
  ZS_RETURN_IF_ERROR(CheckRows("block output gradient", dy.size(), rows));
  ZS_RETURN_IF_ERROR(CheckRows("block input gradient", dx.size(), rows));
  return blocks_[layer].Backward(access, tp_, x.data(), dy.data(), act, scratch_, dx.data());
}

StatusOr<float> TpGpt::HeadForward(UnitAccess& access, std::span<const float> x,
                                   std::span<const int32_t> targets, std::span<const float> wte,
                                   TpHeadActivations& act) const {
  const int64_t rows = static_cast<int64_t>(targets.size()), h = config_.gpt.hidden;
  const VocabShard shard = vocab_shard();
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] < 0 || targets[i] >= config_.gpt.vocab) {
      return InvalidArgumentError(fmt::format("tp gpt: target {} at {} is not in [0, vocab {})",
                                              targets[i], i, config_.gpt.vocab));
    }
  }
  if (rows == 0) return InvalidArgumentError("tp gpt: the head got no targets");
  ZS_RETURN_IF_ERROR(tp_options_.CheckRows(rows));
  ZS_RETURN_IF_ERROR(CheckRows("head input", x.size(), rows));
  if (static_cast<int64_t>(wte.size()) != shard.size * h) {
    return InvalidArgumentError(fmt::format("tp gpt: the head's wte has {} floats, not {} x {}",
                                            wte.size(), shard.size, h));
  }
  const int64_t local = tp_options_.local_rows(rows);
  act.rows = rows;
  act.targets.assign(targets.begin(), targets.end());
  act.xf.resize(local * h);
  act.ln_f_mean.resize(local);
  act.ln_f_rstd.resize(local);
  act.logits.resize(rows * shard.size);
  ln_f_.Forward(access, x.data(), local, act.xf.data(), act.ln_f_mean.data(), act.ln_f_rstd.data());
  // Tied output projection: a column-parallel product with this rank's vocabulary rows.
  ZS_RETURN_IF_ERROR(ColumnParallelLinear::ForwardWithWeights(tp_, tp_options_.sequence_parallel,
                                                              wte, {}, h, act.xf.data(), rows,
                                                              scratch_, act.logits.data()));
  // Logits become probabilities in place.
  ZS_ASSIGN_OR_RETURN(const double loss,
                      VocabParallelCrossEntropyForward(tp_, act.logits.data(), act.targets, shard,
                                                       act.logits.data()));
  return static_cast<float>(loss);
}

Status TpGpt::HeadBackward(UnitAccess& access, std::span<const float> x, std::span<const float> wte,
                           std::span<float> dwte, TpHeadActivations& act,
                           std::span<float> dx) const {
  ZS_CHECK(act.rows > 0, "TpGpt::HeadBackward before HeadForward");
  const int64_t rows = act.rows, h = config_.gpt.hidden;
  const VocabShard shard = vocab_shard();
  ZS_RETURN_IF_ERROR(CheckRows("head input", x.size(), rows));
  ZS_RETURN_IF_ERROR(CheckRows("head input gradient", dx.size(), rows));
  if (static_cast<int64_t>(wte.size()) != shard.size * h || dwte.size() != wte.size()) {
    return InvalidArgumentError(
        fmt::format("tp gpt: the head's wte has {} floats and its gradient {}, not {} x {}",
                    wte.size(), dwte.size(), shard.size, h));
  }
  const int64_t local = tp_options_.local_rows(rows);
  float* dlogits = act.logits.data();
  VocabParallelCrossEntropyBackward(act.logits.data(), act.targets, shard, access.backward_scale(),
                                    dlogits);
  act.dxf.resize(local * h);
  ZS_RETURN_IF_ERROR(ColumnParallelLinear::BackwardWithWeights(
      tp_, tp_options_.sequence_parallel, wte, dwte, {}, h, act.xf.data(), dlogits, rows, scratch_,
      act.dxf.data()));
  return ln_f_.Backward(access, tp_, x.data(), act.ln_f_mean.data(), act.ln_f_rstd.data(),
                        act.dxf.data(), local, dx.data(), scratch_);
}

}  // namespace zs::parallel
