#include "runtime/nn/gpt.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "runtime/base/splitmix64.h"
#include "runtime/nn/cross_entropy.h"
#include "runtime/nn/gemm.h"

namespace zs::nn {
namespace {

std::vector<ModuleParam> Concat(std::vector<ModuleParam> a, const std::vector<ModuleParam>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

Status GptConfig::Validate() const {
  if (vocab <= 0) return InvalidArgumentError(fmt::format("gpt: vocab {} <= 0", vocab));
  if (max_seq <= 0) return InvalidArgumentError(fmt::format("gpt: max_seq {} <= 0", max_seq));
  if (layers <= 0) return InvalidArgumentError(fmt::format("gpt: layers {} <= 0", layers));
  if (hidden <= 0) return InvalidArgumentError(fmt::format("gpt: hidden {} <= 0", hidden));
  if (heads <= 0 || hidden % heads != 0) {
    return InvalidArgumentError(
        fmt::format("gpt: hidden {} is not a positive multiple of heads {}", hidden, heads));
  }
  if (!(layer_drop >= 0.0 && layer_drop < 1.0)) {  // NaN too
    return InvalidArgumentError(
        fmt::format("gpt: layer_drop {} is not a probability in [0, 1)", layer_drop));
  }
  if (vocab > INT32_MAX) {
    return InvalidArgumentError(fmt::format("gpt: vocab {} does not fit int32 tokens", vocab));
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<Gpt>> Gpt::Create(const GptConfig& config, MemoryTracker* tracker) {
  ZS_RETURN_IF_ERROR(config.Validate());
  return std::unique_ptr<Gpt>(new Gpt(config, tracker));
}

Gpt::Gpt(const GptConfig& config, MemoryTracker* tracker)
    : config_(config),
      tracked_(tracker, MemoryTier::kHost, MemoryCategory::kActivations),
      wte_(kEmbedUnit, 0, config.vocab, config.hidden),
      wpe_(kEmbedUnit, 1, config.max_seq, config.hidden),
      ln_f_(config.layers + 1, 0, config.hidden) {
  std::vector<std::pair<std::string, std::vector<ModuleParam>>> units;
  units.emplace_back("embed", Concat(wte_.params("wte."), wpe_.params("wpe.")));
  blocks_.reserve(config.layers);
  for (int l = 0; l < config.layers; ++l) {
    blocks_.emplace_back(block_unit(l), 0, config.hidden, config.heads);
    units.emplace_back(fmt::format("block.{}", l), blocks_.back().params(""));
  }
  units.emplace_back("head", ln_f_.params("ln_f."));
  for (auto& [name, params] : units) {
    UnitSpec unit{name, {}};
    std::vector<InitKind> kinds;
    for (ModuleParam& p : params) {
      unit.params.push_back(std::move(p.spec));
      kinds.push_back(p.init);
    }
    spec_.units.push_back(std::move(unit));
    init_.push_back(std::move(kinds));
  }
  x_.resize(config.layers + 1);
  dropped_.assign(size_t(config.layers), false);
}

Gpt::~Gpt() = default;

ParamInit Gpt::Init(uint64_t seed) const {
  const float residual_std = kInitStd / std::sqrt(2.0f * static_cast<float>(config_.layers));
  return [init = init_, seed, residual_std](int unit, int param, std::span<float> values) {
    ZS_CHECK(unit >= 0 && unit < static_cast<int>(init.size()) && param >= 0 &&
                 param < static_cast<int>(init[unit].size()),
             "Gpt init: no parameter ({}, {})", unit, param);
    switch (init[unit][param]) {
      case InitKind::kZeros:
        std::fill(values.begin(), values.end(), 0.0f);
        break;
      case InitKind::kOnes:
        std::fill(values.begin(), values.end(), 1.0f);
        break;
      case InitKind::kNormal:
        FillNormal(seed, unit, param, kInitStd, values);
        break;
      case InitKind::kNormalResidual:
        FillNormal(seed, unit, param, residual_std, values);
        break;
    }
  };
}

Status Gpt::CheckInputs(const UnitAccess& access, std::span<const int32_t> tokens,
                        std::span<const int32_t> targets, int64_t batch, int64_t seq) const {
  if (batch <= 0) return InvalidArgumentError(fmt::format("gpt: batch {} <= 0", batch));
  if (seq <= 0 || seq > config_.max_seq) {
    return InvalidArgumentError(
        fmt::format("gpt: seq {} is not in [1, max_seq {}]", seq, config_.max_seq));
  }
  const int64_t n = batch * seq;
  if (static_cast<int64_t>(tokens.size()) != n || static_cast<int64_t>(targets.size()) != n) {
    return InvalidArgumentError(
        fmt::format("gpt: {} tokens and {} targets for batch {} x seq {} = {}", tokens.size(),
                    targets.size(), batch, seq, n));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab) {
      return InvalidArgumentError(
          fmt::format("gpt: token {} at {} is not in [0, vocab {})", tokens[i], i, config_.vocab));
    }
    if (targets[i] < 0 || targets[i] >= config_.vocab) {
      return InvalidArgumentError(fmt::format("gpt: target {} at {} is not in [0, vocab {})",
                                              targets[i], i, config_.vocab));
    }
  }
  const ModelSpec& model = access.model();
  if (!model.SameShapes(spec_)) {
    return InvalidArgumentError(fmt::format(
        "gpt: the UnitAccess's model ({} units, {} values) is not this GPT's ({} units, {} values)",
        model.units.size(), model.numel(), spec_.units.size(), spec_.numel()));
  }
  return OkStatus();
}

bool Gpt::DropsBlock(const LayerDropKey& key, int layer) const {
  if (config_.layer_drop <= 0.0) return false;
  uint64_t h = SplitMix64(config_.layer_drop_seed);
  for (uint64_t x :
       {uint64_t(key.step), uint64_t(key.micro_batch), uint64_t(key.rank), uint64_t(layer)}) {
    h = SplitMix64(h ^ x);
  }
  // The top 53 bits as a uniform double in [0, 1).
  return double(h >> 11) * 0x1.0p-53 < config_.layer_drop;
}

StatusOr<float> Gpt::RunForward(UnitAccess& access, std::span<const int32_t> tokens,
                                std::span<const int32_t> targets, int64_t batch, int64_t seq,
                                const LayerDropKey* drop) {
  ZS_RETURN_IF_ERROR(CheckInputs(access, tokens, targets, batch, seq));
  for (int l = 0; drop != nullptr && config_.layer_drop > 0.0 && l < config_.layers; ++l) {
    if (access.AllowsUnusedUnit(block_unit(l))) continue;
    const UnitSpec& unit = spec_.units[size_t(block_unit(l))];
    return FailedPreconditionError(fmt::format(
        "gpt: layer_drop {} leaves blocks out of micro-batches, rank by rank, which this "
        "UnitAccess does not allow for unit '{}' (a ZeroEngine needs "
        "zerostack.allow_unused_units, and at stage 3 each block persistent: "
        "zero_optimization.stage3_param_persistence_threshold >= its {} parameters)",
        config_.layer_drop, unit.name, unit.numel()));
  }
  const int64_t rows = batch * seq, h = config_.hidden, v = config_.vocab;
  rows_ = rows;
  tokens_.assign(tokens.begin(), tokens.end());
  targets_.assign(targets.begin(), targets.end());
  positions_.resize(rows);
  for (int64_t i = 0; i < rows; ++i) positions_[i] = static_cast<int32_t>(i % seq);
  for (std::vector<float>& x : x_) x.resize(rows * h);
  xf_.resize(rows * h);
  ln_f_mean_.resize(rows);
  ln_f_rstd_.resize(rows);
  logits_.resize(rows * v);

  ZS_RETURN_IF_ERROR(access.BeginForward(kEmbedUnit));
  wte_.Forward(access, tokens_, x_[0].data());
  wpe_.Forward(access, positions_, x_[0].data(), /*accumulate=*/true);
  ZS_RETURN_IF_ERROR(access.EndForward(kEmbedUnit));

  for (int l = 0; l < config_.layers; ++l) {
    dropped_[size_t(l)] = drop != nullptr && DropsBlock(*drop, l);
    if (dropped_[size_t(l)]) {  // [Note: LayerDrop]: the identity, no bracket
      x_[l + 1] = x_[l];
      continue;
    }
    ZS_RETURN_IF_ERROR(access.BeginForward(block_unit(l)));
    blocks_[l].Forward(access, x_[l].data(), batch, seq, x_[l + 1].data());
    ZS_RETURN_IF_ERROR(access.EndForward(block_unit(l)));
  }

  ZS_RETURN_IF_ERROR(access.BeginForward(head_unit()));
  ln_f_.Forward(access, x_[config_.layers].data(), rows, xf_.data(), ln_f_mean_.data(),
                ln_f_rstd_.data());
  ZS_RETURN_IF_ERROR(access.BeginForward(kEmbedUnit));  // tied output projection
  const float* wte = access.Param(kEmbedUnit, 0).data();
  Sgemm(false, true, rows, v, h, 1.0f, xf_.data(), h, wte, h, 0.0f, logits_.data(), v);
  ZS_RETURN_IF_ERROR(access.EndForward(kEmbedUnit));
  ZS_RETURN_IF_ERROR(access.EndForward(head_unit()));

  // Logits become probabilities in place; logits() shows them until the next call.
  const double loss = CrossEntropyForward(logits_.data(), targets_, v, logits_.data());
  return static_cast<float>(loss);
}

Status Gpt::RunBackward(UnitAccess& access) {
  const int64_t rows = rows_, h = config_.hidden, v = config_.vocab;
  dx_a_.resize(rows * h);
  dx_b_.resize(rows * h);
  float* dlogits = logits_.data();
  CrossEntropyBackward(logits_.data(), targets_, v, access.backward_scale(), dlogits);

  ZS_RETURN_IF_ERROR(access.BeginBackward(head_unit()));
  ZS_RETURN_IF_ERROR(access.BeginBackward(kEmbedUnit));
  const float* wte = access.Param(kEmbedUnit, 0).data();
  float* dwte = access.Grad(kEmbedUnit, 0).data();
  Sgemm(false, false, rows, h, v, 1.0f, dlogits, v, wte, h, 0.0f, dx_a_.data(), h);  // dxf
  Sgemm(true, false, v, h, rows, 1.0f, dlogits, v, xf_.data(), h, 1.0f, dwte, h);
  ZS_RETURN_IF_ERROR(access.EndBackward(kEmbedUnit));
  ln_f_.Backward(access, x_[config_.layers].data(), ln_f_mean_.data(), ln_f_rstd_.data(),
                 dx_a_.data(), rows, dx_b_.data());
  ZS_RETURN_IF_ERROR(access.EndBackward(head_unit()));

  // dx_b_ holds d/d(output of block l); each block writes d/d(its input) into dx_a_.
  for (int l = config_.layers - 1; l >= 0; --l) {
    if (dropped_[size_t(l)]) continue;  // the identity: dx_b_ passes through as it is
    ZS_RETURN_IF_ERROR(access.BeginBackward(block_unit(l)));
    blocks_[l].Backward(access, x_[l].data(), dx_b_.data(), dx_a_.data());
    ZS_RETURN_IF_ERROR(access.EndBackward(block_unit(l)));
    dx_a_.swap(dx_b_);
  }

  ZS_RETURN_IF_ERROR(access.BeginBackward(kEmbedUnit));
  wte_.Backward(access, tokens_, dx_b_.data());
  wpe_.Backward(access, positions_, dx_b_.data());
  ZS_RETURN_IF_ERROR(access.EndBackward(kEmbedUnit));
  return OkStatus();
}

StatusOr<float> Gpt::ForwardBackward(UnitAccess& access, std::span<const int32_t> tokens,
                                     std::span<const int32_t> targets, int64_t batch, int64_t seq,
                                     const LayerDropKey& drop) {
  ZS_ASSIGN_OR_RETURN(float loss, RunForward(access, tokens, targets, batch, seq, &drop));
  ZS_RETURN_IF_ERROR(RunBackward(access));
  UpdateTracker();
  return loss;
}

StatusOr<float> Gpt::Forward(UnitAccess& access, std::span<const int32_t> tokens,
                             std::span<const int32_t> targets, int64_t batch, int64_t seq) {
  ZS_ASSIGN_OR_RETURN(float loss, RunForward(access, tokens, targets, batch, seq, nullptr));
  UpdateTracker();
  return loss;
}

int64_t Gpt::activation_bytes() const {
  size_t bytes =
      (tokens_.capacity() + targets_.capacity() + positions_.capacity()) * sizeof(int32_t);
  for (const std::vector<float>& x : x_) bytes += x.capacity() * sizeof(float);
  for (const std::vector<float>* v : {&xf_, &ln_f_mean_, &ln_f_rstd_, &logits_, &dx_a_, &dx_b_}) {
    bytes += v->capacity() * sizeof(float);
  }
  int64_t total = static_cast<int64_t>(bytes);
  for (const TransformerBlock& b : blocks_) total += b.activation_bytes();
  return total;
}

void Gpt::UpdateTracker() {
  tracked_.Set(activation_bytes());
}

}  // namespace zs::nn
