#include "runtime/parallel/gpt/segment_cost_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "runtime/base/median.h"
#include "runtime/engine/zero_engine.h"
#include "runtime/parallel/gpt/gpt_chunk.h"

namespace zs::parallel {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Status CheckOptions(const SegmentCostProbeOptions& o) {
  if (o.model.moe.enabled()) {
    return UnimplementedError(fmt::format(
        "measuring segment costs of a GPT with experts ({} per block) is not supported: "
        "partition it by parameter count or by explicit segment costs",
        o.model.moe.experts));
  }
  if (o.warmup < 0 || o.repeats < 1) {
    return InvalidArgumentError(fmt::format(
        "segment cost probe: warmup {} must be >= 0 and repeats {} >= 1", o.warmup, o.repeats));
  }
  if (o.micro_batch < 1 || o.seq < 1 || o.seq > o.model.gpt.max_seq) {
    return InvalidArgumentError(fmt::format(
        "segment cost probe: micro_batch {} and seq {} must be >= 1, seq at most max_seq {}",
        o.micro_batch, o.seq, o.model.gpt.max_seq));
  }
  return OkStatus();
}

// This rank's median forward + backward seconds per segment kind, over `one` (a one-rank
// group for the engine) and the tp group.
StatusOr<SegmentKindCosts> MeasureLocal(const SegmentCostProbeOptions& o, Communicator& tp,
                                        Communicator& one, Device& device,
                                        MemoryTracker* tracker) {
  TpGptConfig config = o.model;
  config.gpt.layers = 1;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<TpGpt> model, TpGpt::Create(config, tp, nullptr, tracker));
  EngineConfig engine_config;
  engine_config.fp16 = o.engine.fp16;
  engine_config.bf16 = o.engine.bf16;
  engine_config.gradient_accumulation_steps = 1;
  EngineParallelism parallel;
  // No Step follows the passes: with per-step reduction the staging accumulates and is never
  // reduced, so the timings hold compute (and tp collectives) only, as the contract says.
  parallel.reduce_per_step = true;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<ZeroEngine> engine,
                      ZeroEngine::Create(engine_config, model->spec(), model->Init(0), device,
                                         one, nullptr, parallel));
  const int32_t vocab = int32_t(config.gpt.vocab);
  MicroBatchData data = [vocab](int mb, std::span<int32_t> tokens, std::span<int32_t> targets) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = int32_t((uint64_t(mb) * 7919u + i * 104729u) % uint64_t(vocab));
      targets[i] = int32_t((uint64_t(mb) * 31u + i * 7u + 1u) % uint64_t(vocab));
    }
    return OkStatus();
  };
  // The three segments as three chunks of one rank: embed [0, 1), block [1, 2), head [2, 3).
  std::array<std::unique_ptr<GptChunk>, 3> chunks;
  for (int s = 0; s < 3; ++s) {
    GptChunkOptions co;
    co.begin = s;
    co.end = s + 1;
    co.batch = o.micro_batch;
    co.seq = o.seq;
    co.recompute = o.recompute;
    co.wte_local = true;  // the head reads wte from this engine, as with one pp rank
    chunks[size_t(s)] = std::make_unique<GptChunk>(*model, *engine, co, data, nullptr, tracker);
  }
  const size_t width = size_t(chunks[0]->output_elements());
  std::vector<float> x0(width), x1(width), dx1(width), dx0(width);
  // Per kind, per timed pass: forward + backward seconds, and the forward's alone.
  std::array<std::vector<double>, 3> timed, timed_forward;
  for (int pass = 0; pass < o.warmup + o.repeats; ++pass) {
    std::array<double, 3> seconds{}, forward{};
    auto t0 = Clock::now();
    ZS_RETURN_IF_ERROR(chunks[0]->Forward(pass, {}, x0).status());
    auto t1 = Clock::now();
    ZS_RETURN_IF_ERROR(chunks[1]->Forward(pass, x0, x1).status());
    auto t2 = Clock::now();
    ZS_RETURN_IF_ERROR(chunks[2]->Forward(pass, x1, {}).status());
    auto t3 = Clock::now();
    ZS_RETURN_IF_ERROR(chunks[2]->Backward(pass, {}, dx1));
    auto t4 = Clock::now();
    ZS_RETURN_IF_ERROR(chunks[1]->Backward(pass, dx1, dx0));
    auto t5 = Clock::now();
    ZS_RETURN_IF_ERROR(chunks[0]->Backward(pass, dx0, {}));
    auto t6 = Clock::now();
    forward = {Seconds(t0, t1), Seconds(t1, t2), Seconds(t2, t3)};
    seconds[0] = forward[0] + Seconds(t5, t6);
    seconds[1] = forward[1] + Seconds(t4, t5);
    seconds[2] = forward[2] + Seconds(t3, t4);
    if (pass < o.warmup) continue;
    for (size_t k = 0; k < 3; ++k) {
      timed[k].push_back(seconds[k]);
      timed_forward[k].push_back(forward[k]);
    }
  }
  SegmentKindCosts out;
  out.embed = Median(timed[0]);
  out.block = Median(timed[1]);
  out.head = Median(timed[2]);
  out.embed_forward = Median(timed_forward[0]);
  out.block_forward = Median(timed_forward[1]);
  out.head_forward = Median(timed_forward[2]);
  return out;
}

}  // namespace

std::vector<double> SegmentKindCosts::PerSegment(int layers) const {
  std::vector<double> costs(size_t(layers) + 2, block);
  costs.front() = embed;
  costs.back() = head;
  return costs;
}

std::string SegmentKindCosts::ToString() const {
  return fmt::format(
      "embed {:.3g} ms, block {:.3g} ms, head {:.3g} ms (forwards {:.3g}, {:.3g}, {:.3g} ms)",
      embed * 1e3, block * 1e3, head * 1e3, embed_forward * 1e3, block_forward * 1e3,
      head_forward * 1e3);
}

StatusOr<SegmentKindCosts> MeasureSegmentCosts(const SegmentCostProbeOptions& options,
                                               const ProcessGroups& groups, Device& device,
                                               MemoryTracker* tracker) {
  ZS_RETURN_IF_ERROR(CheckOptions(options));
  Communicator& world = groups.world();
  // Every rank alone: the probe's engine reduces over nobody.
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> one,
                      world.Split(world.rank(), 0, "segment-cost-probe"));
  StatusOr<SegmentKindCosts> local = MeasureLocal(options, groups.tp(), *one, device, tracker);
  // A rank that failed still takes part in the gather (with NaN), so its peers fail at once
  // naming it instead of waiting out the timeout (unless they are blocked in a tp collective
  // with it, which then times out). One all-gather carries every kind: rank r's kinds are
  // all[r * kKinds .. (r + 1) * kKinds), each double as two f32 elements (bit for bit, as
  // AllGatherScalar sends one).
  constexpr std::array<double SegmentKindCosts::*, 6> kKinds = {
      &SegmentKindCosts::embed,         &SegmentKindCosts::block,
      &SegmentKindCosts::head,          &SegmentKindCosts::embed_forward,
      &SegmentKindCosts::block_forward, &SegmentKindCosts::head_forward};
  const size_t kinds = kKinds.size(), ranks = size_t(world.size());
  std::vector<double> all(ranks * kinds, 0.0);
  double* mine = all.data() + size_t(world.rank()) * kinds;
  for (size_t k = 0; k < kinds; ++k) {
    mine[k] = local.ok() ? (*local).*kKinds[k] : std::numeric_limits<double>::quiet_NaN();
  }
  ZS_RETURN_IF_ERROR(world.AllGather(mine, all.data(), 2 * kinds, DType::kF32)
                         .WithContext("segment cost probe: gathering every rank's costs"));
  SegmentKindCosts combined;
  int failed_rank = -1;
  for (size_t k = 0; k < kinds; ++k) {
    std::vector<double> per_rank(ranks);
    for (size_t r = 0; r < ranks; ++r) {
      per_rank[r] = all[r * kinds + k];
      if (failed_rank < 0 && std::isnan(per_rank[r])) failed_rank = int(r);
    }
    combined.*kKinds[k] = Median(std::move(per_rank));
  }
  if (!local.ok()) {
    return local.status().WithContext(fmt::format(
        "measuring the segment costs of a one-layer probe (micro-batch {}, seq {}) on world "
        "rank {}",
        options.micro_batch, options.seq, world.rank()));
  }
  if (failed_rank >= 0) {
    return AbortedError(fmt::format(
        "segment cost probe: world rank {} failed to measure its segment costs", failed_rank));
  }
  return combined;
}

}  // namespace zs::parallel
