#include "tests/runtime/parallel/gpt/grid_parity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"

namespace zs::parallel::parity {
namespace {

// Token g of the global sample stream: every split of a global batch sees the same samples.
int32_t Token(int step, int64_t sample, int64_t t) {
  uint64_t x = uint64_t(step) * 1000003u + uint64_t(sample) * 7919u + uint64_t(t) * 104729u;
  x ^= x >> 13;
  x *= 0x9E3779B97F4A7C15ull;
  return int32_t((x >> 40) % uint64_t(kVocab));
}

// Adds |mine - want| element by element to `diff`, remembering the worst element by name.
void Accumulate(const std::string& name, std::span<const float> mine, std::span<const float> want,
                ParamDiff& diff) {
  for (size_t k = 0; k < mine.size(); ++k) {
    const double d = std::abs(double(mine[k]) - double(want[k]));
    // NaN compares false everywhere: count it as infinitely far, so no check passes it.
    const double counted = std::isnan(d) ? INFINITY : d;
    if (counted > diff.max || diff.worst.empty()) {
      diff.max = std::max(diff.max, counted);
      diff.worst = fmt::format("{}[{}]: grid {:.9g}, one rank {:.9g}", name, k, mine[k], want[k]);
    }
    diff.sum += counted;
    ++diff.count;
  }
}

// nn::Gpt on one rank, micro-batch b, accumulation ga * dp: the grid's global batch.
StatusOr<Reference> RunDenseReference(const GridSpec& spec) {
  Reference ref;
  const int micro_batches = spec.ga * spec.dp;
  const int64_t b = spec.micro_batch;
  CommOptions options;
  ZS_RETURN_IF_ERROR(
      RunLocalRanks(1, options, [&](int, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        ZS_ASSIGN_OR_RETURN(auto gpt, nn::Gpt::Create(SmallGpt(spec.layers)));
        ZS_ASSIGN_OR_RETURN(auto engine, ZeroEngine::Create(Config(0, micro_batches), gpt->spec(),
                                                            gpt->Init(kSeed), *device, comm));
        std::vector<int32_t> tokens(size_t(b * kSeq)), targets(size_t(b * kSeq));
        // The held-out loss: nn::Gpt's forward-only passes over the global eval batch.
        auto evaluate = [&](int e) -> Status {
          ZS_RETURN_IF_ERROR(engine->BeginEvaluation());
          double loss = 0;
          const int eval_micro_batches = spec.eval_mbs() * spec.dp;
          for (int m = 0; m < eval_micro_batches; ++m) {
            EvalFill(e, m, 0, 1, b, tokens, targets);
            ZS_ASSIGN_OR_RETURN(float l, gpt->Forward(*engine, tokens, targets, b, kSeq));
            loss += double(l) / eval_micro_batches;
          }
          ref.eval_losses.push_back(loss);
          return engine->EndEvaluation();
        };
        for (int step = 0; step < kSteps; ++step) {
          if (spec.evaluate) ZS_RETURN_IF_ERROR(evaluate(step));
          double loss = 0;
          for (int m = 0; m < micro_batches; ++m) {
            Fill(step, m, 0, 1, b, tokens, targets);
            ZS_ASSIGN_OR_RETURN(float l, gpt->ForwardBackward(*engine, tokens, targets, b, kSeq));
            loss += double(l) / micro_batches;
          }
          ZS_ASSIGN_OR_RETURN(StepResult r, engine->Step());
          ref.losses.push_back(loss);
          ref.grad_norms.push_back(r.grad_norm);
        }
        if (spec.evaluate) ZS_RETURN_IF_ERROR(evaluate(kSteps));
        for (int u = 0; u < int(gpt->spec().units.size()); ++u) {
          ref.params.emplace_back();
          for (int p = 0; p < int(gpt->spec().units[size_t(u)].params.size()); ++p) {
            ZS_ASSIGN_OR_RETURN(auto values, engine->GatherMasterParam(u, p));
            ref.params.back().push_back(std::move(values));
          }
        }
        return OkStatus();
      }));
  return ref;
}

// Experts: the same grid code at one rank (every expert local) is the reference.
StatusOr<Reference> RunExpertReference(const GridSpec& spec) {
  GridSpec one = spec;
  one.tp = one.pp = one.dp = one.ep = 1;
  one.ga = spec.ga * spec.dp;
  one.eval_micro_batches = spec.eval_mbs() * spec.dp;
  one.schedule = ScheduleKind::kOneFOneB;
  one.virtual_stages = 1;
  one.lr_scale = 1.0;
  Reference ref;
  CommOptions options;
  ZS_RETURN_IF_ERROR(
      RunLocalRanks(1, options, [&](int, Communicator& comm, MemoryTracker& tracker) -> Status {
        ZS_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(1, 1, 1, 1));
        ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(comm, grid));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        ZS_ASSIGN_OR_RETURN(RankResult r, RunGridRank(one, groups, *device, tracker, nullptr,
                                                      /*collect_named=*/true));
        ref.losses = std::move(r.losses);
        ref.grad_norms = std::move(r.grad_norms);
        ref.eval_losses = std::move(r.eval_losses);
        ref.named = std::move(r.named);
        return OkStatus();
      }));
  return ref;
}

}  // namespace

std::string GridSpec::ToString() const {
  return fmt::format(
      "tp={} pp={} dp={} stage={} schedule={} v={} sp={} recompute={} experts={} ep={}{}", tp, pp,
      dp, stage, ScheduleKindName(schedule), virtual_stages, sequence_parallel, recompute, experts,
      ep, lr_scale == 1.0 ? "" : fmt::format(" lr_scale={}", lr_scale));
}

nn::GptConfig SmallGpt(int layers) {
  nn::GptConfig c;
  c.vocab = kVocab;
  c.max_seq = kSeq;
  c.layers = layers;
  c.hidden = 16;
  c.heads = 4;
  return c;
}

void Fill(int step, int micro, int rank, int dp, int64_t b, std::span<int32_t> tokens,
          std::span<int32_t> targets) {
  for (int64_t row = 0; row < b; ++row) {
    const int64_t g = (int64_t(micro) * dp + rank) * b + row;
    for (int64_t t = 0; t < kSeq; ++t) {
      tokens[size_t(row * kSeq + t)] = Token(step, g, t);
      targets[size_t(row * kSeq + t)] = Token(step, g, t + 1);
    }
  }
}

void EvalFill(int evaluation, int micro, int rank, int dp, int64_t b, std::span<int32_t> tokens,
              std::span<int32_t> targets) {
  Fill(1000 + evaluation, micro, rank, dp, b, tokens, targets);
}

EngineConfig Config(int stage, int accumulation, double lr) {
  EngineConfig c;
  c.zero_optimization.stage = stage;
  c.optimizer.lr = lr;
  c.optimizer.weight_decay = 0.01;
  c.gradient_clipping = 1.0;
  c.gradient_accumulation_steps = accumulation;
  return c;
}

GridGptOptions Options(const GridSpec& spec) {
  GridGptOptions o;
  o.model.gpt = SmallGpt(spec.layers);
  o.model.sequence_parallel = spec.sequence_parallel;
  o.engine = Config(spec.stage, spec.ga, kLr * spec.lr_scale);
  o.micro_batch = spec.micro_batch;
  o.seq = kSeq;
  o.seed = kSeed;
  o.schedule = spec.schedule;
  o.virtual_stages = spec.virtual_stages;
  o.recompute = spec.recompute;
  o.model.moe.experts = spec.experts;
  o.model.moe.capacity_factor = spec.capacity_factor;
  o.ep = spec.ep;
  o.reduce_per_step = spec.reduce_per_step;
  return o;
}

StatusOr<Reference> RunReference(const GridSpec& spec) {
  return spec.experts > 0 ? RunExpertReference(spec) : RunDenseReference(spec);
}

void ParamDiff::Merge(const ParamDiff& other) {
  if (other.count == 0) return;
  if (other.max > max || worst.empty()) {
    max = other.max;
    worst = other.worst;
  }
  sum += other.sum;
  count += other.count;
}

StatusOr<RankResult> RunGridRank(const GridSpec& spec, const ProcessGroups& groups, Device& device,
                                 MemoryTracker& tracker, const Reference* ref, bool collect_named) {
  ZS_ASSIGN_OR_RETURN(auto g, GridGpt::Create(Options(spec), groups, device, &tracker));
  const int dp_rank = groups.coord().dp;
  RankResult out;
  auto evaluate = [&](int e) -> Status {
    ZS_ASSIGN_OR_RETURN(const double loss,
                        g->Evaluate(
                            [&](int mb, std::span<int32_t> tokens, std::span<int32_t> targets) {
                              EvalFill(e, mb, dp_rank, spec.dp, spec.micro_batch, tokens, targets);
                              return OkStatus();
                            },
                            spec.eval_mbs()));
    out.eval_losses.push_back(loss);
    return OkStatus();
  };
  for (int step = 0; step < kSteps; ++step) {
    if (spec.evaluate) ZS_RETURN_IF_ERROR(evaluate(step));
    ZS_ASSIGN_OR_RETURN(GridStepResult r, g->TrainStep([&](int mb, std::span<int32_t> tokens,
                                                           std::span<int32_t> targets) {
      Fill(step, mb, dp_rank, spec.dp, spec.micro_batch, tokens, targets);
      return OkStatus();
    }));
    out.losses.push_back(r.loss);
    out.grad_norms.push_back(r.step.grad_norm);
  }
  if (spec.evaluate) ZS_RETURN_IF_ERROR(evaluate(kSteps));
  ZS_ASSIGN_OR_RETURN(out.digest, g->MasterDigest());
  out.activation_peak = g->activation_peak_bytes();
  out.micro_batch_peak = g->micro_batch_peak_bytes();
  out.comm_buffers_peak = tracker.Peak(MemoryTier::kDevice, MemoryCategory::kCommBuffers);
  if (ref == nullptr && !collect_named) return out;
  // nn::Gpt's full parameters sliced as this rank holds them (dense references).
  ParamInit slice;
  if (ref != nullptr && ref->named.empty()) {
    slice = g->model().ShardInit([ref](int unit, int param, std::span<float> values) {
      const std::vector<float>& full = ref->params[size_t(unit)][size_t(param)];
      std::copy(full.begin(), full.end(), values.begin());
    });
  }
  for (int unit : g->units()) {
    const UnitSpec& us = g->model().spec().units[size_t(unit)];
    for (int p = 0; p < int(us.params.size()); ++p) {
      ZS_ASSIGN_OR_RETURN(std::vector<float> mine, g->GatherMasterParam(unit, p));
      const std::string name = us.name + "/" + us.params[size_t(p)].name;
      if (ref != nullptr) {
        std::vector<float> want;
        if (ref->named.empty()) {
          want.resize(size_t(us.params[size_t(p)].numel()));
          slice(unit, p, want);
        } else if (auto it = ref->named.find(name); it != ref->named.end()) {
          want = it->second;
          // The one-rank run's full value, sliced as this tp rank holds it (replicated
          // parameters, the experts among them, come whole).
          const tp::TpParamLayout& layout = g->model().layout(unit, p);
          if (groups.grid().tp_size() > 1 && int64_t(want.size()) == layout.full_numel()) {
            std::vector<float> sliced(mine.size());
            tp::SliceFull(layout, groups.coord().tp, groups.grid().tp_size(), want, sliced);
            want = std::move(sliced);
          }
        }
        if (want.size() != mine.size()) {
          return InternalError(
              fmt::format("rank {}: {} ({} values) is not in the reference ({} values there)",
                          groups.world().rank(), name, mine.size(), want.size()));
        }
        Accumulate(name, mine, want, out.diff);
      }
      if (collect_named) out.named[name] = std::move(mine);
    }
  }
  return out;
}

std::vector<std::string> ParityFailures(const std::vector<double>& losses,
                                        const std::vector<double>& grad_norms,
                                        const ParamDiff& diff, const Reference& ref,
                                        const std::vector<double>& eval_losses) {
  std::vector<std::string> failures;
  if (eval_losses.size() != ref.eval_losses.size()) {
    failures.push_back(fmt::format("the grid evaluated {} times, the reference {}",
                                   eval_losses.size(), ref.eval_losses.size()));
  }
  for (size_t e = 0; e < std::min(eval_losses.size(), ref.eval_losses.size()); ++e) {
    const double bound = kLossTolerance * std::abs(ref.eval_losses[e]);
    if (!(std::abs(eval_losses[e] - ref.eval_losses[e]) <= bound)) {
      failures.push_back(fmt::format(
          "evaluation {}: held-out loss {:.9g}, one rank {:.9g}: differs by {:.3g} > {:.3g}", e,
          eval_losses[e], ref.eval_losses[e], std::abs(eval_losses[e] - ref.eval_losses[e]),
          bound));
    }
  }
  if (losses.size() != ref.losses.size() || grad_norms.size() != ref.grad_norms.size()) {
    failures.push_back(fmt::format("the grid ran {} steps ({} norms), the reference {}",
                                   losses.size(), grad_norms.size(), ref.losses.size()));
    return failures;
  }
  // Written as !(d <= bound) so that a NaN fails.
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    const double loss_bound = kLossTolerance * std::abs(ref.losses[s]);
    if (!(std::abs(losses[s] - ref.losses[s]) <= loss_bound)) {
      failures.push_back(fmt::format(
          "step {}: loss {:.9g}, one rank {:.9g}: differs by {:.3g} > {:.3g} ({} relative)", s,
          losses[s], ref.losses[s], std::abs(losses[s] - ref.losses[s]), loss_bound,
          kLossTolerance));
    }
    const double norm_bound = kNormTolerance * ref.grad_norms[s];
    if (!(std::abs(grad_norms[s] - ref.grad_norms[s]) <= norm_bound)) {
      failures.push_back(fmt::format(
          "step {}: gradient norm {:.9g}, one rank {:.9g}: differs by {:.3g} > {:.3g} ({} "
          "relative)",
          s, grad_norms[s], ref.grad_norms[s], std::abs(grad_norms[s] - ref.grad_norms[s]),
          norm_bound, kNormTolerance));
    }
  }
  if (diff.count == 0) {
    failures.push_back("no parameter was compared");
  } else {
    if (!(diff.max <= kParamTolerance)) {
      failures.push_back(fmt::format("parameters: max |grid - one rank| {:.3g} > {:.3g} at {}",
                                     diff.max, kParamTolerance, diff.worst));
    }
    if (!(diff.mean() <= kMeanTolerance)) {
      failures.push_back(fmt::format(
          "parameters: mean |grid - one rank| {:.3g} > {:.3g} over {} values (worst {})",
          diff.mean(), kMeanTolerance, diff.count, diff.worst));
    }
  }
  // The loss must have moved, or the comparison shows nothing.
  if (!ref.losses.empty() && ref.losses.front() == ref.losses.back()) {
    failures.push_back(
        fmt::format("the reference's loss did not move ({:.9g})", ref.losses.front()));
  }
  return failures;
}

}  // namespace zs::parallel::parity
