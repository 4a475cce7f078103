#include "runtime/parallel/pipeline/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "runtime/parallel/pipeline/schedule_simulator.h"

namespace zs {
namespace {

using Instructions = std::vector<PipelineInstruction>;

PipelineInstruction F(int micro_batch, int chunk) {
  return {PipelineOp::kForward, micro_batch, chunk};
}
PipelineInstruction B(int micro_batch, int chunk) {
  return {PipelineOp::kBackward, micro_batch, chunk};
}

Instructions GPipe(int m) {
  Instructions out;
  for (int mb = 0; mb < m; ++mb) out.push_back(F(mb, -1));
  for (int mb = 0; mb < m; ++mb) out.push_back(B(mb, -1));
  return out;
}

// PipeDream-Flush on rank r of p: warm-up forwards, steady 1F1B, cool-down backwards.
Instructions OneFOneB(int p, int r, int m) {
  const int warmup = std::min(p - r - 1, m);
  Instructions out;
  for (int mb = 0; mb < warmup; ++mb) out.push_back(F(mb, -1));
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back(F(warmup + i, -1));
    out.push_back(B(i, -1));
  }
  for (int mb = m - warmup; mb < m; ++mb) out.push_back(B(mb, -1));
  return out;
}

// Megatron-LM's forward_backward_pipelining_with_interleaving (m divisible by p). The k-th
// forward (and the k-th backward) of every rank works on micro-batch group k / (p v): inside a
// group, p micro-batches go through local chunk 0, then through local chunk 1, ...; backwards
// walk the local chunks from the last one.
Instructions Interleaved(int p, int r, int m, int v) {
  const int total = m * v;
  const int group = p * v;
  auto micro_batch = [&](int k) { return (k / group) * p + k % p; };
  auto local_chunk = [&](int k, bool forward) {
    const int j = (k % group) / p;
    return forward ? j : v - 1 - j;
  };
  auto forward = [&](int k) { return F(micro_batch(k), local_chunk(k, true) * p + r); };
  auto backward = [&](int k) { return B(micro_batch(k), local_chunk(k, false) * p + r); };
  const int warmup = std::min(2 * (p - r - 1) + (v - 1) * p, total);
  Instructions out;
  for (int k = 0; k < warmup; ++k) out.push_back(forward(k));
  for (int k = 0; k < total - warmup; ++k) {
    out.push_back(forward(warmup + k));
    out.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(backward(k));
  return out;
}

// An evaluation pass on rank r of p: groups of p micro-batches (the last one may be partial),
// each group through local chunk 0, then local chunk 1, ... (Interleaved's forward order).
Instructions ForwardOnly(int p, int r, int m, int v) {
  Instructions out;
  for (int first = 0; first < m; first += p) {
    for (int j = 0; j < v; ++j) {
      for (int mb = first; mb < std::min(first + p, m); ++mb) out.push_back(F(mb, j * p + r));
    }
  }
  return out;
}

std::string Short(const PipelineInstruction& ins) {
  return fmt::format("{}{}c{}", ins.op == PipelineOp::kForward ? 'F' : 'B', ins.micro_batch,
                     ins.chunk);
}

// One message between neighbouring ranks: the data of (micro_batch, sending chunk).
struct Message {
  int micro_batch;
  int chunk;
  bool operator==(const Message&) const = default;
};

}  // namespace

std::string DescribeInstruction(const PipelineInstruction& instruction) {
  return fmt::format("{} of micro-batch {}, chunk {}",
                     instruction.op == PipelineOp::kForward ? "forward" : "backward",
                     instruction.micro_batch, instruction.chunk);
}

std::string_view ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::kOneFOneB:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
  }
  return "?";
}

StatusOr<ScheduleKind> ParseScheduleKind(std::string_view name) {
  for (ScheduleKind k :
       {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved}) {
    if (name == ScheduleKindName(k)) return k;
  }
  return InvalidArgumentError(
      fmt::format("unknown pipeline schedule '{}' (expected gpipe, 1f1b or interleaved)", name));
}

std::string PipelineSchedule::ToString() const {
  std::string out;
  for (int r = 0; r < int(per_rank.size()); ++r) {
    out += fmt::format("rank {}:", r);
    for (const PipelineInstruction& ins : per_rank[r]) out += " " + Short(ins);
    out += "\n";
  }
  return out;
}

StatusOr<PipelineSchedule> BuildSchedule(ScheduleKind kind, int ranks, int micro_batches,
                                         int virtual_stages) {
  const std::string what =
      fmt::format("{} schedule with p={} pp ranks, m={} micro-batches, v={} virtual stages",
                  ScheduleKindName(kind), ranks, micro_batches, virtual_stages);
  if (ranks < 1 || micro_batches < 1 || virtual_stages < 1) {
    return InvalidArgumentError(fmt::format("{}: p, m and v must be >= 1", what));
  }
  if (kind != ScheduleKind::kInterleaved && virtual_stages != 1) {
    return InvalidArgumentError(
        fmt::format("{}: only the interleaved schedule takes virtual stages (v > 1)", what));
  }
  if (kind == ScheduleKind::kInterleaved && micro_batches % ranks != 0) {
    return InvalidArgumentError(fmt::format(
        "{}: the interleaved schedule needs m divisible by p (micro-batches run through each "
        "chunk in groups of p)",
        what));
  }
  PipelineSchedule schedule;
  schedule.kind = kind;
  schedule.ranks = ranks;
  schedule.micro_batches = micro_batches;
  schedule.virtual_stages = virtual_stages;
  for (int r = 0; r < ranks; ++r) {
    Instructions list;
    switch (kind) {
      case ScheduleKind::kGPipe:
        list = GPipe(micro_batches);
        break;
      case ScheduleKind::kOneFOneB:
        list = OneFOneB(ranks, r, micro_batches);
        break;
      case ScheduleKind::kInterleaved:
        list = Interleaved(ranks, r, micro_batches, virtual_stages);
        break;
    }
    if (kind != ScheduleKind::kInterleaved) {
      for (PipelineInstruction& ins : list) ins.chunk = r;
    }
    schedule.per_rank.push_back(std::move(list));
  }
  return schedule;
}

StatusOr<PipelineSchedule> BuildForwardOnlySchedule(ScheduleKind kind, int ranks, int micro_batches,
                                                    int virtual_stages) {
  if (ranks < 1 || micro_batches < 1 || virtual_stages < 1) {
    return InvalidArgumentError(
        fmt::format("forward-only pipeline pass with p={} pp ranks, m={} micro-batches, v={} "
                    "virtual stages: p, m and v must be >= 1",
                    ranks, micro_batches, virtual_stages));
  }
  PipelineSchedule schedule;
  schedule.kind = kind;
  schedule.ranks = ranks;
  schedule.micro_batches = micro_batches;
  schedule.virtual_stages = virtual_stages;
  schedule.forward_only = true;
  for (int r = 0; r < ranks; ++r) {
    schedule.per_rank.push_back(ForwardOnly(ranks, r, micro_batches, virtual_stages));
  }
  return schedule;
}

Status ValidateScheduleStructure(const PipelineSchedule& s) {
  if (s.ranks < 1 || s.micro_batches < 1 || s.virtual_stages < 1) {
    return InvalidArgumentError(
        fmt::format("pipeline schedule with p={} ranks, m={} micro-batches, v={} virtual "
                    "stages: each must be >= 1",
                    s.ranks, s.micro_batches, s.virtual_stages));
  }
  if (int(s.per_rank.size()) != s.ranks) {
    return InvalidArgumentError(fmt::format(
        "pipeline schedule for p={} ranks has {} instruction lists", s.ranks, s.per_rank.size()));
  }
  const int n = s.num_chunks();
  const int m = s.micro_batches;
  // seen[op][chunk * m + mb]: where the instruction was found (position in its rank's list).
  std::vector<int> seen[2] = {std::vector<int>(size_t(n) * m, -1),
                              std::vector<int>(size_t(n) * m, -1)};
  for (int r = 0; r < s.ranks; ++r) {
    for (int i = 0; i < int(s.per_rank[r].size()); ++i) {
      const PipelineInstruction& ins = s.per_rank[r][i];
      const std::string where =
          fmt::format("rank {} instruction {} ({})", r, i, DescribeInstruction(ins));
      if (ins.chunk < 0 || ins.chunk >= n || ins.micro_batch < 0 || ins.micro_batch >= m) {
        return InvalidArgumentError(fmt::format(
            "{}: out of range (chunks 0..{}, micro-batches 0..{})", where, n - 1, m - 1));
      }
      if (s.RankOfChunk(ins.chunk) != r) {
        return InvalidArgumentError(fmt::format("{}: chunk {} is held by rank {}", where, ins.chunk,
                                                s.RankOfChunk(ins.chunk)));
      }
      if (s.forward_only && ins.op == PipelineOp::kBackward) {
        return InvalidArgumentError(fmt::format("{}: a backward in a forward-only pass", where));
      }
      int& slot = seen[int(ins.op)][size_t(ins.chunk) * m + ins.micro_batch];
      if (slot >= 0) {
        return InvalidArgumentError(
            fmt::format("{}: already scheduled as instruction {}", where, slot));
      }
      slot = i;
      if (ins.op == PipelineOp::kBackward &&
          seen[int(PipelineOp::kForward)][size_t(ins.chunk) * m + ins.micro_batch] < 0) {
        return InvalidArgumentError(fmt::format("{}: comes before its forward", where));
      }
    }
  }
  for (int op = 0; op < (s.forward_only ? 1 : 2); ++op) {
    for (int c = 0; c < n; ++c) {
      for (int mb = 0; mb < m; ++mb) {
        if (seen[op][size_t(c) * m + mb] < 0) {
          return InvalidArgumentError(fmt::format("rank {} never runs the {}", s.RankOfChunk(c),
                                                  DescribeInstruction({PipelineOp(op), mb, c})));
        }
      }
    }
  }
  return OkStatus();
}

Status ValidateSchedule(const PipelineSchedule& s) {
  ZS_RETURN_IF_ERROR(ValidateScheduleStructure(s));
  const int p = s.ranks;
  if (p > 1) {
    // Per rank and direction, the messages it sends and those it receives, in list order.
    // Forward messages go to rank r + 1 (mod p), backward ones to rank r - 1 (mod p).
    std::vector<std::vector<Message>> sent[2], received[2];
    for (int op = 0; op < 2; ++op) {
      sent[op].resize(p);
      received[op].resize(p);
    }
    for (int r = 0; r < p; ++r) {
      for (const PipelineInstruction& ins : s.per_rank[r]) {
        const int op = int(ins.op);
        if (ins.op == PipelineOp::kForward) {
          if (!s.IsFirstChunk(ins.chunk))
            received[op][r].push_back({ins.micro_batch, ins.chunk - 1});
          if (!s.IsLastChunk(ins.chunk)) sent[op][r].push_back({ins.micro_batch, ins.chunk});
        } else {
          if (!s.IsLastChunk(ins.chunk))
            received[op][r].push_back({ins.micro_batch, ins.chunk + 1});
          if (!s.IsFirstChunk(ins.chunk)) sent[op][r].push_back({ins.micro_batch, ins.chunk});
        }
      }
    }
    for (int op = 0; op < 2; ++op) {
      for (int src = 0; src < p; ++src) {
        const int dst = op == int(PipelineOp::kForward) ? (src + 1) % p : (src + p - 1) % p;
        const std::vector<Message>& a = sent[op][src];
        const std::vector<Message>& b = received[op][dst];
        const char* kind = op == int(PipelineOp::kForward) ? "activations" : "gradients";
        if (a.size() != b.size()) {
          return InvalidArgumentError(
              fmt::format("rank {} sends {} {} messages to rank {}, which "
                          "receives {}",
                          src, a.size(), kind, dst, b.size()));
        }
        for (size_t k = 0; k < a.size(); ++k) {
          if (a[k] != b[k]) {
            return InvalidArgumentError(fmt::format(
                "{} message {} from rank {} to rank {}: sent for micro-batch {} of chunk {} but "
                "received as micro-batch {} of chunk {} (point-to-point messages match in order)",
                kind, k, src, dst, a[k].micro_batch, a[k].chunk, b[k].micro_batch, b[k].chunk));
          }
        }
      }
    }
  }
  return SimulateSchedule(s, ChunkCosts::Uniform(s.num_chunks(), 1.0, 2.0)).status();
}

int MaxInFlight(const std::vector<PipelineInstruction>& instructions) {
  int live = 0, peak = 0;
  for (const PipelineInstruction& ins : instructions) {
    live += ins.op == PipelineOp::kForward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace zs
