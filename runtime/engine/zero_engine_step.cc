// ZeroEngine's step: finishing the reductions, the global norm, clipping, the optimizer pass
// and the parameter all-gather (Step, and its halves PrepareStep/FinishStep for models whose
// parameters live in several engines). The hooks, the layout and Create are zero_engine.cc's;
// the optimizer tiles and offload are zero_engine_offload.cc's.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "runtime/base/check.h"
#include "runtime/comm/all_gather_scalar.h"
#include "runtime/engine/zero_engine_impl.h"

namespace zs {

double ZeroEngine::Impl::ShardSumSquares(double inv_scale) const {
  const int rank = dp_.rank();
  const size_t elem = DTypeSize(dtype_);
  // Off tp rank 0, the parameters every tp rank holds whole are skipped: tp rank 0 counts them;
  // likewise off ep rank 0 the parameters every ep rank holds alike.
  const bool skip_tp = parallel_.tp_rank != 0, skip_ep = parallel_.ep_rank != 0;
  auto skipped = [&](const ParamSpec& p) {
    return (skip_tp && !p.tensor_parallel) || (skip_ep && !p.expert_parallel);
  };
  double sum_squares = 0.0;
  for (size_t u = 0; u < units_.size(); ++u) {
    const UnitState& s = units_[u];
    if (s.frozen) continue;  // [Note: frozen units]: no gradient, no part in the norm
    const int64_t shard_begin = s.layout.ShardRangeInUnit(rank).begin.value();
    const int64_t shard_end = shard_begin + s.layout.shard_size();
    const char* g = s.grads.data_as<const char>() + (shard_begin - s.grad_base) * elem;
    // The shard's elements in ascending order, minus the skipped parameters' ranges (those are
    // ascending too), so that with nothing skipped the sum runs exactly as a plain loop.
    int64_t next = shard_begin;
    auto add_until = [&](int64_t end) {
      for (int64_t i = next; i < end; ++i) {
        const double x = double(LoadAsFloat(g, dtype_, size_t(i - shard_begin))) * inv_scale;
        sum_squares += x * x;
      }
    };
    if (skip_tp || skip_ep) {
      for (int p = 0; p < s.layout.num_params(); ++p) {
        if (!skipped(model_.units[u].params[size_t(p)])) continue;
        const UnitRange r = s.layout.ParamRangeInUnit(p);
        const int64_t b = std::clamp(r.begin.value(), shard_begin, shard_end);
        const int64_t e = std::clamp(r.begin.value() + r.size(), shard_begin, shard_end);
        if (b >= e) continue;
        add_until(b);
        next = e;
      }
    }
    add_until(shard_end);
  }
  return sum_squares;
}

Status ZeroEngine::Impl::ReduceAccumulatedGradients() {
  // Reverse unit order, as backward would have handed them over.
  for (int u = int(units_.size()) - 1; u >= 0; --u) {
    UnitState& s = units_[size_t(u)];
    MicroBatchUse* use = s.Find(0);  // reduce_per_step: every bracket's record
    if (use == nullptr && s.open == 0 && config_.zerostack.allow_unused_units) {
      s.reduced = config_.gradient_accumulation_steps;  // [Note: unused units]: not run at all
      ZS_RETURN_IF_ERROR(ReduceZeros(u, /*accumulate=*/false));
      continue;
    }
    if (use == nullptr || !use->in_backward() || s.open > 0 ||
        use->backward_done != use->forward_uses) {
      return FailedPreconditionError(fmt::format(
          "Step(): unit '{}' has forward uses {}, backward brackets done {} and open {} this "
          "step; every forward needs its backward before Step() (reduce_per_step)",
          model_.units[size_t(u)].name, use == nullptr ? 0 : use->forward_uses,
          use == nullptr ? 0 : use->backward_done, s.open));
    }
    s.reduced = config_.gradient_accumulation_steps;
    ZS_RETURN_IF_ERROR(ReduceMicroBatch(u, *use, /*accumulate=*/false));
  }
  return OkStatus();
}

StatusOr<double> ZeroEngine::Impl::PrepareStep() {
  ZS_CHECK(!prepared_, "PrepareStep() twice without FinishStep()");
  if (evaluating_) {
    return FailedPreconditionError("Step() during an evaluation: call EndEvaluation() first");
  }
  step_start_ = std::chrono::steady_clock::now();
  if (parallel_.reduce_per_step) ZS_RETURN_IF_ERROR(ReduceAccumulatedGradients());
  {
    TraceRecorder::Span finish = Traced(track_reduce_, "finish reductions");
    ZS_RETURN_IF_ERROR(reducer_->Finish());
  }
  const int64_t ga = config_.gradient_accumulation_steps;
  for (size_t u = 0; u < units_.size(); ++u) {
    const UnitState& s = units_[u];
    if (s.reduced != ga || s.open > 0 || !s.in_flight.empty()) {
      int uses_without_backward = 0;
      for (const MicroBatchUse& use : s.in_flight) {
        uses_without_backward += use.forward_uses - use.backward_done;
      }
      // A unit some micro-batch left out: the option that allows it.
      const bool unused =
          s.open == 0 && s.in_flight.empty() && !config_.zerostack.allow_unused_units;
      return FailedPreconditionError(fmt::format(
          "Step(): unit '{}' completed {} micro-batches (brackets open: {}, forward uses "
          "without backward: {} in {} micro-batch(es)); gradient_accumulation_steps is {}{}",
          model_.units[u].name, s.reduced, s.open, uses_without_backward, s.in_flight.size(), ga,
          unused ? "; a micro-batch that leaves units out needs zerostack.allow_unused_units"
                 : ""));
    }
  }
  // A non-finite square anywhere makes the total non-finite on every rank (fp16 overflow).
  const double inv_scale = 1.0 / double(scaler_.scale());
  // Rank order: the same bits on every rank and stage.
  ZS_ASSIGN_OR_RETURN(const double total, AllSumScalar(dp_, ShardSumSquares(inv_scale)));
  prepared_ = true;
  return total;
}

StatusOr<StepResult> ZeroEngine::Impl::Step() {
  ZS_ASSIGN_OR_RETURN(double total, PrepareStep());
  if (parallel_.model_parallel != nullptr && parallel_.model_parallel->size() > 1) {
    ZS_ASSIGN_OR_RETURN(total, AllSumScalar(*parallel_.model_parallel, total));
  }
  return FinishStep(total);
}

StatusOr<StepResult> ZeroEngine::Impl::FinishStep(double total) {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  ZS_CHECK(prepared_, "FinishStep() without PrepareStep()");
  prepared_ = false;
  const Clock::time_point step_start = step_start_;
  // One "step" span from PrepareStep's start to FinishStep's end, recorded on every return.
  struct StepSpan {
    TraceRecorder* trace;
    int track;
    Clock::time_point start;
    ~StepSpan() {
      if (trace != nullptr) trace->Record(track, "step", start, Clock::now());
    }
  } step_span{trace_, track_step_, step_start};
  StepResult result;
  result.loss_scale = scaler_.scale();
  const double inv_scale = 1.0 / double(scaler_.scale());
  bool overflow = false;
  result.grad_norm = std::sqrt(total);
  if (config_.fp16.enabled) overflow = !std::isfinite(total);

  if (gatherer_ != nullptr) ZS_RETURN_IF_ERROR(gatherer_->EndStep());
  if (overflow || !std::isfinite(total)) {
    for (UnitState& s : units_) s.reduced = 0;
    if (param_store_ != nullptr) param_store_->EndPass();  // the gathers' pass ends here too
    if (!overflow) {
      // bf16 / fp32: nothing to rescale, so a non-finite gradient is not a step to skip but a
      // diverged run (every rank has the same total, so all fail here together). The step is
      // not taken and the engine stays usable, e.g. at a lower learning rate.
      return FailedPreconditionError(fmt::format(
          "optimizer step {}: the global gradient norm is {} (the loss or a gradient is not "
          "finite; the run has diverged); the step was not taken. Lower optimizer.params.lr or "
          "tighten gradient_clipping; fp16 would skip such steps by loss scaling",
          step_ + 1, result.grad_norm));
    }
    scaler_.Update(true);
    result.skipped = true;
    result.step = step_;
    return result;
  }
  const double clip = config_.gradient_clipping;
  if (clip > 0 && result.grad_norm > clip) result.clip_coef = clip / (result.grad_norm + 1e-6);
  const float grad_scale = float(inv_scale * result.clip_coef);
  result.lr = schedule_->At(step_);

  for (UnitState& s : units_) s.reduced = 0;
  const ShardStoreStats store_before = states_->stats();
  const TileCopyStats copy_before = copies_->stats();
  const Clock::time_point tiles_start = Clock::now();
  result.times.collective_seconds = std::chrono::duration<double>(tiles_start - step_start).count();
  ZS_RETURN_IF_ERROR(StepTiles(Hyper(result.lr), grad_scale));
  {
    const ShardStoreStats& st = states_->stats();
    const TileCopyStats& ct = copies_->stats();
    StepTimes& t = result.times;
    t.copy_wait_seconds = ct.wait_seconds - copy_before.wait_seconds;
    t.nvme_read_wait_seconds = st.read_wait_seconds - store_before.read_wait_seconds;
    t.nvme_write_wait_seconds = st.write_wait_seconds - store_before.write_wait_seconds;
    t.optimizer_seconds = seconds(tiles_start) - t.copy_wait_seconds - t.nvme_read_wait_seconds -
                          t.nvme_write_wait_seconds;
    t.device_to_host_bytes = ct.device_to_host_bytes - copy_before.device_to_host_bytes;
    t.host_to_device_bytes = ct.host_to_device_bytes - copy_before.host_to_device_bytes;
    t.nvme_read_bytes = st.bytes_read - store_before.bytes_read;
    t.nvme_written_bytes = st.bytes_written - store_before.bytes_written;
  }
  const Clock::time_point gather_start = Clock::now();
  TraceRecorder::Span gather_span = Traced(track_gather_, "all-gather updated parameters");
  // Stages 1 and 2: every rank updated its shard of the resident parameters; gather the rest,
  // in place, unit by unit, with at most allgather_bucket_size elements in flight (at least one
  // unit) so a transport's staging stays bounded.
  if (stage() == 1 || stage() == 2) {
    ZS_RETURN_IF_ERROR(AllGatherUpdatedParams(/*frozen_too=*/false));
  }
  if (gatherer_ != nullptr) ZS_RETURN_IF_ERROR(gatherer_->RegatherPersistent());
  if (param_store_ != nullptr) param_store_->EndPass();  // a step is one pass over the shards
  result.times.collective_seconds += seconds(gather_start);
  result.times.step_seconds = seconds(step_start);
  scaler_.Update(false);
  ++step_;
  result.step = step_;
  return result;
}

}  // namespace zs
