#include "runtime/parallel/pipeline/pipeline_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

namespace zs {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The all-gather of Create moves int64 sizes as raw bytes in f32 slots: a gather copies bytes
// and does no arithmetic, so any bit pattern arrives intact.
constexpr int kFloatsPerInt64 = int(sizeof(int64_t) / sizeof(float));

std::string Where(int rank, int index, const PipelineInstruction& ins) {
  return fmt::format("pipeline rank {}, instruction {} ({})", rank, index,
                     DescribeInstruction(ins));
}

}  // namespace

double PipelineStepResult::busy_s() const {
  double sum = 0;
  for (const InstructionTiming& t : timings) sum += t.end_s - t.start_s;
  return sum;
}

double PipelineStepResult::last_end_s() const {
  return timings.empty() ? 0.0 : timings.back().end_s;
}

double MeasuredBubbleFraction(std::span<const PipelineStepResult> ranks) {
  if (ranks.empty()) return 0;
  Clock::time_point first = ranks[0].start;
  for (const PipelineStepResult& r : ranks) first = std::min(first, r.start);
  double makespan = 0, busy = 0;
  for (const PipelineStepResult& r : ranks) {
    makespan = std::max(makespan, Seconds(r.start - first) + r.last_end_s());
    busy += r.busy_s();
  }
  return makespan > 0 ? 1.0 - busy / (double(ranks.size()) * makespan) : 0.0;
}

// One RunStep: the receives posted and not yet consumed, the sends not yet known delivered,
// and (p = 1) the activations and gradients handed between chunks of this rank.
class PipelineRunner::Step {
 public:
  Step(PipelineRunner& runner, const PipelineSchedule& schedule)
      : runner_(runner), s_(schedule), list_(s_.per_rank[runner.rank_]), recvs_(list_.size()) {}

  StatusOr<PipelineStepResult> Run() {
    PipelineStepResult result;
    result.start = Clock::now();
    const bool has_last = s_.RankOfChunk(s_.num_chunks() - 1) == runner_.rank_;
    if (has_last) result.losses.assign(s_.micro_batches, 0.f);
    result.timings.reserve(list_.size());
    Status error;
    for (int i = 0; i < int(list_.size()) && error.ok(); ++i) {
      PostReceivesUpTo(std::min<int>(i + runner_.options_.recv_lookahead, int(list_.size()) - 1));
      error = RunInstruction(i, result);
      if (Status reaped = runner_.buffers_.Reap(); error.ok()) error = std::move(reaped);
    }
    FinishAll(&error);
    if (!error.ok()) return error;
    result.wall_s = Seconds(Clock::now() - result.start);
    return result;
  }

 private:
  struct PendingRecv {
    std::vector<float> buffer;
    CommHandle handle;
  };

  bool NeedsInput(const PipelineInstruction& ins) const {
    return ins.op == PipelineOp::kForward ? !s_.IsFirstChunk(ins.chunk)
                                          : !s_.IsLastChunk(ins.chunk);
  }
  bool SendsOutput(const PipelineInstruction& ins) const {
    return ins.op == PipelineOp::kForward ? !s_.IsLastChunk(ins.chunk)
                                          : !s_.IsFirstChunk(ins.chunk);
  }
  PipelineChunk& ChunkOf(const PipelineInstruction& ins) const {
    return *runner_.chunks_[s_.LocalIndexOfChunk(ins.chunk)];
  }
  // What the instruction receives: an activation (input_elements) or the gradient of its output.
  int64_t InputElements(const PipelineInstruction& ins) const {
    return ins.op == PipelineOp::kForward ? ChunkOf(ins).input_elements()
                                          : ChunkOf(ins).output_elements();
  }
  int64_t OutputElements(const PipelineInstruction& ins) const {
    return ins.op == PipelineOp::kForward ? ChunkOf(ins).output_elements()
                                          : ChunkOf(ins).input_elements();
  }
  bool Local() const { return s_.ranks == 1; }

  void PostReceivesUpTo(int last) {
    for (; next_post_ <= last; ++next_post_) {
      const PipelineInstruction& ins = list_[next_post_];
      if (!NeedsInput(ins) || Local()) continue;
      PendingRecv& r = recvs_[next_post_].emplace();
      r.buffer = runner_.buffers_.Acquire(InputElements(ins));
      Communicator& comm = ins.op == PipelineOp::kForward ? runner_.links_.RecvActivations()
                                                          : runner_.links_.RecvGradients();
      const int peer =
          ins.op == PipelineOp::kForward ? runner_.links_.prev_rank() : runner_.links_.next_rank();
      r.handle = comm.StartRecv(r.buffer.data(), r.buffer.size(), DType::kF32, peer);
    }
  }

  // Takes the instruction's input (waiting for its receive); empty when it has none.
  StatusOr<std::vector<float>> TakeInput(int i) {
    const PipelineInstruction& ins = list_[i];
    if (!NeedsInput(ins)) return std::vector<float>();
    if (Local()) {
      auto it = handed_.find(Key(ins.op, ins.micro_batch, ins.chunk));
      ZS_CHECK(it != handed_.end(), "no input for {}", DescribeInstruction(ins));
      std::vector<float> buffer = std::move(it->second);
      handed_.erase(it);
      return buffer;
    }
    ZS_CHECK(recvs_[i].has_value(), "receive of instruction {} was never posted", i);
    PendingRecv r = std::move(*recvs_[i]);
    recvs_[i].reset();
    Status status = r.handle.Wait();
    if (!status.ok()) {
      runner_.buffers_.Release(std::move(r.buffer));
      return status.WithContext(ins.op == PipelineOp::kForward
                                    ? "receiving its input activation"
                                    : "receiving the gradient of its output");
    }
    return std::move(r.buffer);
  }

  Status RunInstruction(int i, PipelineStepResult& result) {
    const PipelineInstruction& ins = list_[i];
    TraceRecorder* const trace = runner_.options_.trace;
    const Clock::time_point waited = Clock::now();
    StatusOr<std::vector<float>> input = TakeInput(i);
    if (!input.ok()) return input.status().WithContext(Where(runner_.rank_, i, ins));
    std::vector<float> output;
    if (SendsOutput(ins)) output = runner_.buffers_.Acquire(OutputElements(ins));

    PipelineChunk& chunk = ChunkOf(ins);
    const Clock::time_point began = Clock::now();
    const std::string args =
        trace == nullptr
            ? std::string()
            : fmt::format("{{\"micro_batch\":{},\"chunk\":{}}}", ins.micro_batch, ins.chunk);
    if (trace != nullptr && NeedsInput(ins) && !Local()) {
      trace->Record(runner_.trace_wait_,
                    fmt::format("wait for the {} of micro-batch {}",
                                ins.op == PipelineOp::kForward ? "activation" : "gradient",
                                ins.micro_batch),
                    waited, began, args);
    }
    InstructionTiming timing{ins, Seconds(began - result.start), 0};
    Status status;
    if (ins.op == PipelineOp::kForward) {
      StatusOr<float> loss = s_.forward_only ? chunk.ForwardOnly(ins.micro_batch, *input, output)
                                             : chunk.Forward(ins.micro_batch, *input, output);
      status = loss.status();
      if (loss.ok() && s_.IsLastChunk(ins.chunk)) result.losses[ins.micro_batch] = *loss;
    } else {
      status = chunk.Backward(ins.micro_batch, *input, output);
    }
    const Clock::time_point ended = Clock::now();
    timing.end_s = Seconds(ended - result.start);
    result.timings.push_back(timing);
    if (trace != nullptr) {
      trace->Record(runner_.trace_compute_, DescribeInstruction(ins), began, ended, args);
    }
    runner_.buffers_.Release(std::move(*input));
    if (!status.ok()) {
      runner_.buffers_.Release(std::move(output));
      return status.WithContext(Where(runner_.rank_, i, ins));
    }
    if (!SendsOutput(ins)) return OkStatus();

    if (Local()) {
      const int to = ins.op == PipelineOp::kForward ? ins.chunk + 1 : ins.chunk - 1;
      handed_[Key(ins.op, ins.micro_batch, to)] = std::move(output);
      return OkStatus();
    }
    Communicator& comm = ins.op == PipelineOp::kForward ? runner_.links_.SendActivations()
                                                        : runner_.links_.SendGradients();
    const int peer =
        ins.op == PipelineOp::kForward ? runner_.links_.next_rank() : runner_.links_.prev_rank();
    runner_.buffers_.Start(
        comm, std::move(output), peer,
        fmt::format("{}: sending its {}", Where(runner_.rank_, i, ins),
                    ins.op == PipelineOp::kForward ? "output activation" : "input gradient"));
    return OkStatus();
  }

  // Waits every operation still in flight (on success: the sends; after an error: the
  // receives posted ahead too), keeping the first error.
  void FinishAll(Status* error) {
    if (Status sent = runner_.buffers_.WaitAll(); error->ok()) *error = std::move(sent);
    for (std::optional<PendingRecv>& r : recvs_) {
      if (!r.has_value()) continue;
      r->handle.Wait().IgnoreError();  // only posted ahead of an error: the step is lost anyway
      runner_.buffers_.Release(std::move(r->buffer));
      r.reset();
    }
  }

  static std::tuple<int, int, int> Key(PipelineOp op, int micro_batch, int chunk) {
    return {int(op), micro_batch, chunk};
  }

  PipelineRunner& runner_;
  const PipelineSchedule& s_;
  const std::vector<PipelineInstruction>& list_;
  std::vector<std::optional<PendingRecv>> recvs_;  // by instruction index
  int next_post_ = 0;                              // the next instruction to post a receive for
  // p = 1: (op, micro-batch, receiving chunk) -> the data handed to it.
  std::map<std::tuple<int, int, int>, std::vector<float>> handed_;
};

PipelineRunner::PipelineRunner(int rank, PipelineSchedule schedule,
                               std::vector<PipelineChunk*> chunks, PipelineLinks links,
                               PipelineRunnerOptions options)
    : rank_(rank),
      schedule_(std::move(schedule)),
      chunks_(std::move(chunks)),
      links_(std::move(links)),
      options_(options),
      buffers_(options.tracker, MemoryTier::kHost, MemoryCategory::kActivations) {
  if (options_.trace != nullptr) {
    trace_compute_ = options_.trace->Track("pipeline");
    trace_wait_ = options_.trace->Track("pipeline.wait");
  }
}

PipelineRunner::~PipelineRunner() = default;

StatusOr<std::unique_ptr<PipelineRunner>> PipelineRunner::Create(Communicator& pp,
                                                                 PipelineSchedule schedule,
                                                                 std::vector<PipelineChunk*> chunks,
                                                                 PipelineRunnerOptions options) {
  const int rank = pp.rank();
  const std::string who =
      fmt::format("pipeline runner on rank {} of group '{}'", rank, pp.group_name());
  // Local checks first. Their verdict is shared in the all-gather below, so that a rank with
  // bad arguments makes its peers fail at once instead of at the timeout.
  Status local = ValidateSchedule(schedule);
  if (local.ok() && schedule.ranks != pp.size()) {
    local = InvalidArgumentError(fmt::format("{}: the schedule is for {} ranks, the group has {}",
                                             who, schedule.ranks, pp.size()));
  }
  if (local.ok() && int(chunks.size()) != schedule.virtual_stages) {
    local = InvalidArgumentError(fmt::format("{}: got {} chunks for {} virtual stages", who,
                                             chunks.size(), schedule.virtual_stages));
  }
  for (size_t j = 0; local.ok() && j < chunks.size(); ++j) {
    if (chunks[j] == nullptr) {
      local = InvalidArgumentError(fmt::format("{}: chunk of local index {} is null", who, j));
    }
  }
  if (local.ok() && options.recv_lookahead < 0) {
    local = InvalidArgumentError(
        fmt::format("{}: recv_lookahead {} must be >= 0", who, options.recv_lookahead));
  }
  if (!local.ok()) local = local.WithContext(who);

  // First the schedule's shape, in a message of fixed size: ranks that disagree on it (say,
  // on the virtual stages) fail alike here, before the size exchange below, whose length
  // depends on it.
  {
    const int64_t shape[4] = {int64_t(schedule.kind), schedule.ranks, schedule.micro_batches,
                              schedule.virtual_stages};
    std::vector<float> send(4 * kFloatsPerInt64);
    std::memcpy(send.data(), shape, sizeof(shape));
    std::vector<float> gathered(send.size() * size_t(pp.size()));
    Status gather = pp.AllGather(send.data(), gathered.data(), send.size(), DType::kF32);
    if (!gather.ok()) return gather.WithContext(fmt::format("{}: exchanging schedules", who));
    std::vector<int64_t> all(4 * size_t(pp.size()));
    std::memcpy(all.data(), gathered.data(), all.size() * sizeof(int64_t));
    for (int r = 0; r < pp.size(); ++r) {
      const int64_t* o = &all[4 * size_t(r)];
      if (!std::equal(o, o + 4, shape)) {
        return InvalidArgumentError(fmt::format(
            "{}: rank {} runs schedule {} for {} ranks, {} micro-batches, {} virtual stages; "
            "this rank {} for {}, {}, {}",
            who, r, o[0] >= 0 && o[0] <= 2 ? ScheduleKindName(ScheduleKind(o[0])) : "?", o[1], o[2],
            o[3], ScheduleKindName(schedule.kind), shape[1], shape[2], shape[3]));
      }
    }
  }

  // Per rank: [ok, (input, output) per local chunk] as int64, all-gathered as raw f32 slots.
  const int v = std::max(schedule.virtual_stages, 1);
  const int per_rank = 1 + 2 * v;
  std::vector<int64_t> mine(per_rank, -1);
  mine[0] = local.ok() ? 1 : 0;
  if (local.ok()) {
    for (int j = 0; j < v; ++j) {
      mine[1 + 2 * j] = chunks[j]->input_elements();
      mine[2 + 2 * j] = chunks[j]->output_elements();
    }
  }
  std::vector<float> send(size_t(per_rank) * kFloatsPerInt64);
  std::memcpy(send.data(), mine.data(), mine.size() * sizeof(int64_t));
  std::vector<float> gathered(send.size() * size_t(pp.size()));
  Status gather = pp.AllGather(send.data(), gathered.data(), send.size(), DType::kF32);
  if (!local.ok()) return local;
  if (!gather.ok()) return gather.WithContext(fmt::format("{}: exchanging chunk sizes", who));
  std::vector<int64_t> all(size_t(per_rank) * pp.size());
  std::memcpy(all.data(), gathered.data(), all.size() * sizeof(int64_t));

  const int p = schedule.ranks;
  for (int r = 0; r < p; ++r) {
    if (all[size_t(r) * per_rank] != 1) {
      return InvalidArgumentError(
          fmt::format("{}: rank {} rejected its arguments (see its error)", who, r));
    }
  }
  const int n = schedule.num_chunks();
  auto size_of = [&](int chunk, bool output) {
    const int r = schedule.RankOfChunk(chunk), j = schedule.LocalIndexOfChunk(chunk);
    return all[size_t(r) * per_rank + 1 + 2 * j + (output ? 1 : 0)];
  };
  if (size_of(0, false) != 0) {
    return InvalidArgumentError(fmt::format(
        "{}: the first chunk (rank 0) takes {} input elements; it must take 0 (it reads its own "
        "data)",
        who, size_of(0, false)));
  }
  if (size_of(n - 1, true) != 0) {
    return InvalidArgumentError(fmt::format(
        "{}: the last chunk {} (rank {}) has {} output elements; it must have 0 (it computes "
        "the loss)",
        who, n - 1, schedule.RankOfChunk(n - 1), size_of(n - 1, true)));
  }
  for (int c = 0; c < n; ++c) {
    if (size_of(c, false) < 0 || size_of(c, true) < 0) {
      return InvalidArgumentError(fmt::format("{}: chunk {} (rank {}) has negative sizes {}/{}",
                                              who, c, schedule.RankOfChunk(c), size_of(c, false),
                                              size_of(c, true)));
    }
    if (c + 1 < n && size_of(c, true) != size_of(c + 1, false)) {
      return InvalidArgumentError(
          fmt::format("{}: chunk {} (rank {}) outputs {} elements but chunk {} (rank {}) takes {}",
                      who, c, schedule.RankOfChunk(c), size_of(c, true), c + 1,
                      schedule.RankOfChunk(c + 1), size_of(c + 1, false)));
    }
  }

  const bool wrap = schedule.virtual_stages > 1 && p > 1;
  StatusOr<PipelineLinks> links = PipelineLinks::Create(pp, wrap);
  if (!links.ok()) return links.status().WithContext(who);
  return std::unique_ptr<PipelineRunner>(
      new PipelineRunner(rank, std::move(schedule), std::move(chunks), std::move(*links), options));
}

StatusOr<PipelineStepResult> PipelineRunner::RunStep() { return Run(schedule_); }

StatusOr<PipelineStepResult> PipelineRunner::RunForwardOnly(int micro_batches) {
  if (broken_.ok() &&
      (!forward_only_.forward_only || forward_only_.micro_batches != micro_batches)) {
    StatusOr<PipelineSchedule> pass = BuildForwardOnlySchedule(
        schedule_.kind, schedule_.ranks, micro_batches, schedule_.virtual_stages);
    Status valid = pass.ok() ? ValidateSchedule(*pass) : pass.status();
    if (!valid.ok()) {
      // Every rank builds the same pass from the same m, so every rank fails alike here.
      return valid.WithContext(fmt::format("pipeline rank {}: forward-only pass", rank_));
    }
    forward_only_ = std::move(*pass);
  }
  return Run(forward_only_);
}

StatusOr<PipelineStepResult> PipelineRunner::Run(const PipelineSchedule& schedule) {
  if (!broken_.ok()) {
    return AbortedError(fmt::format("pipeline rank {} is broken by an earlier error: {}", rank_,
                                    broken_.ToString()));
  }
  StatusOr<PipelineStepResult> result = Step(*this, schedule).Run();
  if (!result.ok()) broken_ = result.status();
  return result;
}

}  // namespace zs
