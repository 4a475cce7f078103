#include "runtime/parallel/pipeline/schedule_simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace zs {

ChunkCosts ChunkCosts::Uniform(int chunks, double forward, double backward) {
  ChunkCosts out;
  out.forward.assign(chunks, forward);
  out.backward.assign(chunks, backward);
  return out;
}

namespace {

bool BadCost(double x) { return !(x >= 0) || !std::isfinite(x); }

Status CheckTransfer(double transfer) {
  if (BadCost(transfer)) {
    return InvalidArgumentError(
        fmt::format("transfer cost {}: must be finite and >= 0", transfer));
  }
  return OkStatus();
}

}  // namespace

InstructionCosts InstructionCosts::FromChunks(const ChunkCosts& chunks, int micro_batches) {
  InstructionCosts out;
  out.transfer = chunks.transfer;
  for (size_t c = 0; c < chunks.forward.size(); ++c) {
    out.forward.insert(out.forward.end(), size_t(micro_batches), chunks.forward[c]);
  }
  for (size_t c = 0; c < chunks.backward.size(); ++c) {
    out.backward.insert(out.backward.end(), size_t(micro_batches), chunks.backward[c]);
  }
  return out;
}

StatusOr<ScheduleSimulation> SimulateSchedule(const PipelineSchedule& s, const ChunkCosts& costs) {
  // The structure is checked by the instruction form.
  const int n = s.num_chunks();
  if (int(costs.forward.size()) != n || int(costs.backward.size()) != n) {
    return InvalidArgumentError(
        fmt::format("chunk costs have {} forward and {} backward entries for {} chunks",
                    costs.forward.size(), costs.backward.size(), n));
  }
  for (int c = 0; c < n; ++c) {
    if (BadCost(costs.forward[c]) || BadCost(costs.backward[c])) {
      return InvalidArgumentError(
          fmt::format("chunk {} costs forward {} and backward {}: must be finite and >= 0", c,
                      costs.forward[c], costs.backward[c]));
    }
  }
  ZS_RETURN_IF_ERROR(CheckTransfer(costs.transfer));
  return SimulateSchedule(s, InstructionCosts::FromChunks(costs, s.micro_batches));
}

StatusOr<ScheduleSimulation> SimulateSchedule(const PipelineSchedule& s,
                                              const InstructionCosts& costs) {
  ZS_RETURN_IF_ERROR(ValidateScheduleStructure(s));
  const int n = s.num_chunks();
  const int m = s.micro_batches;
  const size_t entries = size_t(n) * size_t(m);
  if (costs.forward.size() != entries || costs.backward.size() != entries) {
    return InvalidArgumentError(fmt::format(
        "instruction costs have {} forward and {} backward entries for {} chunks x {} "
        "micro-batches",
        costs.forward.size(), costs.backward.size(), n, m));
  }
  for (size_t i = 0; i < entries; ++i) {
    if (BadCost(costs.forward[i]) || BadCost(costs.backward[i])) {
      return InvalidArgumentError(fmt::format(
          "chunk {} micro-batch {} costs forward {} and backward {}: must be finite and >= 0",
          i / size_t(m), i % size_t(m), costs.forward[i], costs.backward[i]));
    }
  }
  ZS_RETURN_IF_ERROR(CheckTransfer(costs.transfer));

  // end[op][c * m + mb]: when the instruction ended; NaN until it ran.
  constexpr double kNotYet = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> end[2] = {std::vector<double>(size_t(n) * m, kNotYet),
                                std::vector<double>(size_t(n) * m, kNotYet)};
  auto end_of = [&](PipelineOp op, int mb, int c) { return end[int(op)][size_t(c) * m + mb]; };

  ScheduleSimulation out;
  out.per_rank.resize(s.ranks);
  out.busy.assign(s.ranks, 0.0);
  out.finish.assign(s.ranks, 0.0);
  std::vector<size_t> next(s.ranks, 0);
  std::vector<double> clock(s.ranks, 0.0);

  // The earliest start of `ins` on rank r given what ran so far; NaN when an input is missing.
  auto ready_time = [&](int r, const PipelineInstruction& ins) {
    double t = clock[r];
    auto need = [&](PipelineOp op, int c) {
      const double e = end_of(op, ins.micro_batch, c);
      const double hop = s.RankOfChunk(c) == r ? 0.0 : costs.transfer;
      t = std::isnan(e) ? e : (std::isnan(t) ? t : std::max(t, e + hop));
    };
    if (ins.op == PipelineOp::kForward) {
      if (!s.IsFirstChunk(ins.chunk)) need(PipelineOp::kForward, ins.chunk - 1);
    } else {
      need(PipelineOp::kForward, ins.chunk);
      if (!s.IsLastChunk(ins.chunk)) need(PipelineOp::kBackward, ins.chunk + 1);
    }
    return t;
  };

  size_t remaining = 0;
  for (const auto& list : s.per_rank) remaining += list.size();
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < s.ranks; ++r) {
      while (next[r] < s.per_rank[r].size()) {
        const PipelineInstruction& ins = s.per_rank[r][next[r]];
        const double start = ready_time(r, ins);
        if (std::isnan(start)) break;
        const size_t at = size_t(ins.chunk) * m + ins.micro_batch;
        const double cost =
            ins.op == PipelineOp::kForward ? costs.forward[at] : costs.backward[at];
        const double finish = start + cost;
        end[int(ins.op)][at] = finish;
        out.per_rank[r].push_back({ins, start, finish});
        out.busy[r] += cost;
        clock[r] = finish;
        ++next[r];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      std::string blocked;
      for (int r = 0; r < s.ranks; ++r) {
        if (next[r] == s.per_rank[r].size()) continue;
        if (!blocked.empty()) blocked += "; ";
        blocked += fmt::format("rank {} at instruction {} ({})", r, next[r],
                               DescribeInstruction(s.per_rank[r][next[r]]));
      }
      return InvalidArgumentError(fmt::format(
          "pipeline schedule ({}, p={}, m={}, v={}) deadlocks: every waiting rank needs data "
          "that is never produced first: {}",
          ScheduleKindName(s.kind), s.ranks, m, s.virtual_stages, blocked));
    }
  }

  double busy_sum = 0;
  for (int r = 0; r < s.ranks; ++r) {
    out.finish[r] = clock[r];
    out.makespan = std::max(out.makespan, clock[r]);
    out.max_in_flight.push_back(MaxInFlight(s.per_rank[r]));
    busy_sum += out.busy[r];
  }
  out.bubble_fraction = out.makespan > 0 ? 1.0 - busy_sum / (s.ranks * out.makespan) : 0.0;
  return out;
}

double IdealBubbleFraction(ScheduleKind kind, int ranks, int micro_batches, int virtual_stages) {
  const double p = ranks, m = micro_batches;
  const double v = kind == ScheduleKind::kInterleaved ? virtual_stages : 1;
  const double bubble = (p - 1) / v;
  return bubble / (m + bubble);
}

}  // namespace zs
