// PipelineRunner over ranks as threads (the `local` backend): every schedule at p = 1..4 with
// many micro-batches trains the toy chain (toy_chain.h) to the same losses and gradients, bit for
// bit, as one rank running the whole chain; chunk, argument and peer failures are named and
// never hang. Multi-rank: world sizes 1-4, declared by each test.
#include "runtime/parallel/pipeline/pipeline_runner.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/backend_registry.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/parallel/pipeline/stage_partition.h"
#include "tests/runtime/parallel/pipeline/rendezvous_communicator.h"
#include "tests/runtime/parallel/pipeline/toy_chain.h"
#include "tests/status_is.h"

namespace zs::testing {
namespace {

using std::chrono::milliseconds;

CommOptions Options(milliseconds timeout) {
  CommOptions options;
  options.timeout = timeout;
  options.group_name = "pp";
  return options;
}

struct Case {
  ScheduleKind kind;
  int p, m, v;
  int lookahead;
};

std::string Name(const Case& c) {
  return std::string(ScheduleKindName(c.kind)) + " p=" + std::to_string(c.p) +
         " m=" + std::to_string(c.m) + " v=" + std::to_string(c.v) +
         " lookahead=" + std::to_string(c.lookahead);
}

// What the ranks of one pipelined run produced, gathered per model chunk.
struct PipelinedRun {
  std::vector<float> losses;
  std::vector<std::vector<std::vector<float>>> dw, db;  // [chunk][layer in chunk]
  StagePartition partition;
};

constexpr int kLayers = 12;
constexpr int kWidth = 3;
constexpr int kSteps = 2;

// The runner's trace: every step's instructions, in list order, as spans on "pipeline" named
// by DescribeInstruction with their micro-batch and chunk; and on "pipeline.wait" one span per
// instruction whose input came from another rank, ending where that instruction began.
void ExpectTraced(const TraceRecorder& trace, const PipelineSchedule& schedule, int rank) {
  const nlohmann::json events = nlohmann::json::parse(trace.ToJson())["traceEvents"];
  std::vector<nlohmann::json> compute, wait;
  for (const nlohmann::json& e : events) {
    if (e["ph"] != "X") continue;
    (e["cat"] == "pipeline" ? compute : wait).push_back(e);
    EXPECT_TRUE(e["cat"] == "pipeline" || e["cat"] == "pipeline.wait") << e.dump();
  }
  const std::vector<PipelineInstruction>& list = schedule.per_rank[rank];
  ASSERT_EQ(compute.size(), kSteps * list.size()) << "rank " << rank;
  size_t remote_inputs = 0;
  for (size_t k = 0; k < compute.size(); ++k) {
    const PipelineInstruction& ins = list[k % list.size()];
    EXPECT_EQ(compute[k]["name"], DescribeInstruction(ins)) << "span " << k;
    EXPECT_EQ(compute[k]["args"]["micro_batch"], ins.micro_batch);
    EXPECT_EQ(compute[k]["args"]["chunk"], ins.chunk);
    const bool needs_input = ins.op == PipelineOp::kForward ? !schedule.IsFirstChunk(ins.chunk)
                                                            : !schedule.IsLastChunk(ins.chunk);
    if (needs_input && schedule.ranks > 1) {
      ASSERT_LT(remote_inputs, wait.size()) << "no wait span for span " << k;
      const nlohmann::json& w = wait[remote_inputs++];
      EXPECT_EQ(w["args"]["micro_batch"], ins.micro_batch);
      EXPECT_EQ(w["args"]["chunk"], ins.chunk);
      // It ends where the instruction begins (1 ns of rounding in the written microseconds).
      EXPECT_NEAR(double(w["ts"]) + double(w["dur"]), double(compute[k]["ts"]), 2e-3);
    }
  }
  EXPECT_EQ(wait.size(), remote_inputs) << "rank " << rank;
}

// Runs `kSteps` steps of the case's schedule over the toy chain, one thread per pp rank; with
// `rendezvous`, over RendezvousCommunicator (sends wait for their receive to be posted).
PipelinedRun RunPipelined(const ToyChain& chain, const Case& c, bool rendezvous = false) {
  PipelinedRun out;
  RendezvousWorld world;
  std::vector<double> costs(kLayers, 1.0);
  out.partition = *PartitionVirtualStages(costs, c.p, c.v);
  const int chunks = out.partition.num_chunks();
  out.dw.resize(chunks);
  out.db.resize(chunks);
  std::mutex mu;
  Status status = RunLocalRanks(
      c.p, Options(milliseconds(30'000)),
      [&](int rank, Communicator& local, MemoryTracker& tracker) -> Status {
        RendezvousCommunicator wrapped(world, &local);
        Communicator& pp = rendezvous ? static_cast<Communicator&>(wrapped) : local;
        ZS_ASSIGN_OR_RETURN(PipelineSchedule schedule, BuildSchedule(c.kind, c.p, c.m, c.v));
        std::vector<std::unique_ptr<ToyChunk>> mine;
        std::vector<PipelineChunk*> pointers;
        for (int chunk : out.partition.ChunksOfRank(rank)) {
          const ChunkUnits r = out.partition.chunks[chunk];
          mine.push_back(
              std::make_unique<ToyChunk>(chain, r.begin, r.end, chunk == 0, chunk == chunks - 1));
          pointers.push_back(mine.back().get());
        }
        PipelineRunnerOptions options;
        options.recv_lookahead = c.lookahead;
        options.tracker = &tracker;
        TraceRecorder trace(rank);
        options.trace = &trace;
        {
          ZS_ASSIGN_OR_RETURN(std::unique_ptr<PipelineRunner> runner,
                              PipelineRunner::Create(pp, schedule, pointers, options));
          for (int step = 0; step < kSteps; ++step) {
            ZS_ASSIGN_OR_RETURN(PipelineStepResult result, runner->RunStep());
            EXPECT_EQ(result.timings.size(), schedule.per_rank[rank].size());
            for (size_t i = 0; i < result.timings.size(); ++i) {
              EXPECT_EQ(result.timings[i].instruction, schedule.per_rank[rank][i]);
              EXPECT_LE(result.timings[i].start_s, result.timings[i].end_s);
              EXPECT_LE(result.timings[i].end_s, result.wall_s);
            }
            const bool has_last = rank == schedule.RankOfChunk(chunks - 1);
            EXPECT_EQ(result.losses.size(), has_last ? size_t(c.m) : 0u);
            if (has_last) {
              std::lock_guard<std::mutex> lock(mu);
              out.losses = result.losses;
            }
          }
          if (c.p > 1) {
            EXPECT_GT(tracker.Current(MemoryTier::kHost, MemoryCategory::kActivations), 0)
                << "message buffers are counted";
          }
          ExpectTraced(trace, schedule, rank);
        }
        EXPECT_EQ(tracker.Current(MemoryTier::kHost, MemoryCategory::kActivations), 0);
        std::lock_guard<std::mutex> lock(mu);
        for (size_t j = 0; j < mine.size(); ++j) {
          const int chunk = out.partition.ChunksOfRank(rank)[j];
          EXPECT_EQ(mine[j]->forwards, kSteps * c.m);
          EXPECT_EQ(mine[j]->backwards, kSteps * c.m);
          EXPECT_EQ(mine[j]->live_activations(), 0u);
          out.dw[chunk] = mine[j]->dw;
          out.db[chunk] = mine[j]->db;
        }
        return OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status.ToString();
  return out;
}

void ExpectBitwiseEqual(const PipelinedRun& got, const ToyReference& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t mb = 0; mb < want.losses.size(); ++mb) {
    EXPECT_EQ(got.losses[mb], want.losses[mb]) << "loss of micro-batch " << mb;
  }
  for (int c = 0; c < got.partition.num_chunks(); ++c) {
    const ChunkUnits r = got.partition.chunks[c];
    ASSERT_EQ(int(got.dw[c].size()), r.size()) << "chunk " << c;
    for (int k = r.begin; k < r.end; ++k) {
      EXPECT_EQ(got.dw[c][k - r.begin], want.dw[k]) << "dW of layer " << k;
      EXPECT_EQ(got.db[c][k - r.begin], want.db[k]) << "db of layer " << k;
    }
  }
}

std::vector<Case> ParityCases() {
  std::vector<Case> out;
  for (int p = 1; p <= 4; ++p) {
    for (int m : {1, 2, p, 2 * p + 1, 3 * p, 16}) {
      for (int lookahead : {0, 3}) {
        out.push_back({ScheduleKind::kGPipe, p, m, 1, lookahead});
        out.push_back({ScheduleKind::kOneFOneB, p, m, 1, lookahead});
        if (m % p != 0) continue;
        for (int v = 1; v <= 3; ++v) {
          if (p * v <= kLayers) out.push_back({ScheduleKind::kInterleaved, p, m, v, lookahead});
        }
      }
    }
  }
  return out;
}

// World sizes 1-4: every schedule, several micro-batch counts (fewer than p, equal, not a
// multiple, many), receives posted late and early; losses and gradients equal the reference
// bit for bit (same layer code, exact fp32 messages, each chunk's backwards in micro-batch
// order).
TEST(PipelineRunnerTest, EveryScheduleMatchesOneRankBitForBit) {
  RegisterBuiltinBackends();
  const ToyChain chain = ToyChain::Make(kLayers, kWidth, 42);
  for (const Case& c : ParityCases()) {
    SCOPED_TRACE(Name(c));
    const ToyReference want = RunToyReference(chain, c.m, kSteps);
    ExpectBitwiseEqual(RunPipelined(chain, c), want);
    if (HasFatalFailure()) return;
  }
}

// World sizes 2-4 under the strictest send semantics communicator.h allows: a Send moves no
// data (and holds its communicator's queue) until the matching Recv is posted. 1F1B's crossing
// directions and the interleaved wrap-around would deadlock on one shared communicator; the
// runner's per-channel links must not (a deadlock fails at the timeout, not hangs).
TEST(PipelineRunnerTest, EveryScheduleIsDeadlockFreeWithRendezvousSends) {
  RegisterBuiltinBackends();
  const ToyChain chain = ToyChain::Make(kLayers, kWidth, 43);
  for (int p = 2; p <= 4; ++p) {
    for (int m : {p, 3 * p}) {
      for (int lookahead : {0, 2}) {
        std::vector<Case> cases = {{ScheduleKind::kGPipe, p, m, 1, lookahead},
                                   {ScheduleKind::kOneFOneB, p, m, 1, lookahead},
                                   {ScheduleKind::kInterleaved, p, m, 2, lookahead},
                                   {ScheduleKind::kInterleaved, p, m, 3, lookahead}};
        for (const Case& c : cases) {
          SCOPED_TRACE(Name(c));
          ExpectBitwiseEqual(RunPipelined(chain, c, /*rendezvous=*/true),
                             RunToyReference(chain, c.m, kSteps));
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// The helper is strict: two ranks that each send before receiving on one communicator
// deadlock under it (and fail at the timeout), though the local backend alone would not.
TEST(PipelineRunnerTest, RendezvousHelperCatchesASharedQueueDeadlock) {
  RegisterBuiltinBackends();
  RendezvousWorld world;
  std::vector<Status> results(2);
  RunLocalRanks(2, Options(milliseconds(300)),
                [&](int rank, Communicator& local, MemoryTracker&) -> Status {
                  RendezvousCommunicator pp(world, &local);
                  float out = 1, in = 0;
                  CommHandle send = pp.StartSend(&out, 1, DType::kF32, 1 - rank);
                  CommHandle recv = pp.StartRecv(&in, 1, DType::kF32, 1 - rank);
                  results[rank] = send.Wait();
                  recv.Wait().IgnoreError();
                  return OkStatus();
                })
      .IgnoreError();
  for (const Status& s : results) {
    EXPECT_TRUE(StatusIs(s, StatusCode::kDeadlineExceeded, {"no receive posted"}));
  }
}

// A chunk whose Backward fails on one micro-batch.
class FailingChunk : public ToyChunk {
 public:
  FailingChunk(const ToyChain& chain, int begin, int end, bool first, bool last, int fail_mb)
      : ToyChunk(chain, begin, end, first, last), fail_mb_(fail_mb) {}
  Status Backward(int mb, std::span<const float> output_grad,
                  std::span<float> input_grad) override {
    if (mb == fail_mb_) return InternalError("toy chunk lost its activations");
    return ToyChunk::Backward(mb, output_grad, input_grad);
  }

 private:
  const int fail_mb_;
};

struct FailureRun {
  std::vector<Status> first;   // each rank's first RunStep
  std::vector<Status> second;  // each rank's second RunStep (after the failure)
};

// p = 3 ranks; rank 1's chunk fails the backward of micro-batch 2.
FailureRun RunWithFailure(ScheduleKind kind, int v, int lookahead, milliseconds timeout) {
  constexpr int p = 3, m = 6;
  const ToyChain chain = ToyChain::Make(kLayers, kWidth, 5);
  std::vector<double> costs(kLayers, 1.0);
  const StagePartition partition = *PartitionVirtualStages(costs, p, v);
  FailureRun out;
  out.first.resize(p);
  out.second.resize(p);
  RunLocalRanks(p, Options(timeout), [&](int rank, Communicator& pp, MemoryTracker&) -> Status {
    ZS_ASSIGN_OR_RETURN(PipelineSchedule schedule, BuildSchedule(kind, p, m, v));
    std::vector<std::unique_ptr<ToyChunk>> mine;
    std::vector<PipelineChunk*> pointers;
    for (int chunk : partition.ChunksOfRank(rank)) {
      const ChunkUnits r = partition.chunks[chunk];
      const bool first = chunk == 0, last = chunk == partition.num_chunks() - 1;
      if (rank == 1) {
        mine.push_back(std::make_unique<FailingChunk>(chain, r.begin, r.end, first, last, 2));
      } else {
        mine.push_back(std::make_unique<ToyChunk>(chain, r.begin, r.end, first, last));
      }
      pointers.push_back(mine.back().get());
    }
    PipelineRunnerOptions options;
    options.recv_lookahead = lookahead;
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<PipelineRunner> runner,
                        PipelineRunner::Create(pp, schedule, pointers, options));
    out.first[rank] = runner->RunStep().status();
    out.second[rank] = runner->RunStep().status();
    return OkStatus();
  }).IgnoreError();
  return out;
}

// World size 3. The failing rank names itself, the instruction and the micro-batch; its
// neighbours fail because its communicators went away (at once: the timeout is long, so a
// runner that only failed at the deadline would report DeadlineExceeded). Then broken.
TEST(PipelineRunnerTest, ChunkFailureIsNamedAndPeersFailFast) {
  RegisterBuiltinBackends();
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB}) {
    SCOPED_TRACE(ScheduleKindName(kind));
    FailureRun run = RunWithFailure(kind, 1, 0, milliseconds(60'000));
    EXPECT_TRUE(StatusIs(run.first[1], StatusCode::kInternal,
                         {"pipeline rank 1, instruction", "backward of micro-batch 2, chunk 1",
                          "toy chunk lost its activations"}));
    EXPECT_TRUE(StatusIs(run.second[1], StatusCode::kAborted,
                         {"pipeline rank 1 is broken", "toy chunk lost its activations"}));
    // A neighbour fails in the step of the failure or, if it had all it needed (GPipe's last
    // rank), in the next one, when its receive finds the failed rank gone.
    for (int r : {0, 2}) {
      const Status& failed = run.first[r].ok() ? run.second[r] : run.first[r];
      EXPECT_FALSE(failed.ok()) << "rank " << r;
      EXPECT_NE(failed.code(), StatusCode::kDeadlineExceeded) << failed.ToString();
      EXPECT_NE(failed.message().find("pipeline rank " + std::to_string(r)), std::string::npos)
          << failed.ToString();
      if (!run.first[r].ok()) {
        EXPECT_EQ(run.second[r].code(), StatusCode::kAborted);
      }
    }
  }
}

// World size 3, interleaved (the wrap-around link) with receives posted ahead: nobody hangs;
// posted receives whose senders are stuck end at the (short) timeout at the latest.
TEST(PipelineRunnerTest, FailureWithReceivesPostedAheadEndsByTheTimeout) {
  RegisterBuiltinBackends();
  FailureRun run = RunWithFailure(ScheduleKind::kInterleaved, 2, 4, milliseconds(1'500));
  EXPECT_TRUE(StatusIs(run.first[1], StatusCode::kInternal,
                       {"pipeline rank 1, instruction", "backward of micro-batch 2",
                        "toy chunk lost its activations"}));
  for (int r : {0, 2}) EXPECT_FALSE(run.first[r].ok()) << "rank " << r;
}

// World size 2: a peer that never runs its step (alive, silent) fails the waiting rank at the
// communicator's timeout, naming what it waited for.
TEST(PipelineRunnerTest, SilentPeerFailsAtTheTimeout) {
  RegisterBuiltinBackends();
  const ToyChain chain = ToyChain::Make(4, kWidth, 9);
  Status waiting;
  RunLocalRanks(2, Options(milliseconds(300)),
                [&](int rank, Communicator& pp, MemoryTracker&) -> Status {
                  ZS_ASSIGN_OR_RETURN(PipelineSchedule schedule,
                                      BuildSchedule(ScheduleKind::kOneFOneB, 2, 4));
                  ToyChunk chunk(chain, 2 * rank, 2 * rank + 2, rank == 0, rank == 1);
                  ZS_ASSIGN_OR_RETURN(std::unique_ptr<PipelineRunner> runner,
                                      PipelineRunner::Create(pp, schedule, {&chunk}));
                  if (rank == 1) {
                    std::this_thread::sleep_for(milliseconds(1'200));  // 4x the timeout
                    return OkStatus();
                  }
                  waiting = runner->RunStep().status();
                  return OkStatus();
                })
      .IgnoreError();
  EXPECT_TRUE(StatusIs(waiting, StatusCode::kDeadlineExceeded,
                       {"pipeline rank 0, instruction 2 (backward of micro-batch 0, chunk 0)",
                        "receiving the gradient of its output", "timed out after 300 ms"}));
}

// A chunk with the given sizes, for Create's checks.
class SizedChunk : public PipelineChunk {
 public:
  SizedChunk(int64_t in, int64_t out) : in_(in), out_(out) {}
  int64_t input_elements() const override { return in_; }
  int64_t output_elements() const override { return out_; }
  StatusOr<float> Forward(int, std::span<const float>, std::span<float>) override { return 0.f; }
  Status Backward(int, std::span<const float>, std::span<float>) override { return OkStatus(); }

 private:
  int64_t in_, out_;
};

// Runs Create on p ranks with sizes[rank] = {input, output} per local chunk; returns each
// rank's status.
std::vector<Status> CreateWithSizes(int p, ScheduleKind kind, int v,
                                    std::vector<std::vector<std::pair<int64_t, int64_t>>> sizes,
                                    int schedule_ranks = 0) {
  std::vector<Status> out(p);
  RunLocalRanks(p, Options(milliseconds(60'000)),
                [&](int rank, Communicator& pp, MemoryTracker&) -> Status {
                  PipelineSchedule schedule =
                      *BuildSchedule(kind, schedule_ranks > 0 ? schedule_ranks : p, 2 * p, v);
                  std::vector<std::unique_ptr<SizedChunk>> mine;
                  std::vector<PipelineChunk*> pointers;
                  for (auto [in, o] : sizes[rank]) {
                    mine.push_back(std::make_unique<SizedChunk>(in, o));
                    pointers.push_back(mine.back().get());
                  }
                  out[rank] = PipelineRunner::Create(pp, schedule, pointers).status();
                  return OkStatus();
                })
      .IgnoreError();
  return out;
}

// World sizes 2 and 3: every rank reports the same mismatch, naming chunks, ranks and sizes.
TEST(PipelineRunnerTest, CreateChecksSizesOnEveryRank) {
  RegisterBuiltinBackends();
  std::vector<Status> mismatch =
      CreateWithSizes(3, ScheduleKind::kOneFOneB, 1, {{{0, 8}}, {{8, 16}}, {{15, 0}}});
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(StatusIs(mismatch[r], StatusCode::kInvalidArgument,
                         {"chunk 1 (rank 1) outputs 16 elements but chunk 2 (rank 2) takes 15"}))
        << "rank " << r;
  }
  std::vector<Status> first = CreateWithSizes(2, ScheduleKind::kGPipe, 1, {{{4, 8}}, {{8, 0}}});
  for (const Status& s : first) {
    EXPECT_TRUE(StatusIs(s, StatusCode::kInvalidArgument, {"first chunk", "takes 4 input"}));
  }
  std::vector<Status> last =
      CreateWithSizes(2, ScheduleKind::kInterleaved, 2, {{{0, 8}, {8, 8}}, {{8, 8}, {8, 3}}});
  for (const Status& s : last) {
    EXPECT_TRUE(StatusIs(s, StatusCode::kInvalidArgument, {"last chunk 3 (rank 1)", "3 output"}));
  }
  // One rank with the wrong number of chunks: it names itself, the others name it.
  std::vector<Status> count =
      CreateWithSizes(2, ScheduleKind::kInterleaved, 2, {{{0, 8}, {8, 8}}, {{8, 8}}});
  EXPECT_TRUE(StatusIs(count[1], StatusCode::kInvalidArgument, {"got 1 chunks for 2 virtual"}));
  EXPECT_TRUE(StatusIs(count[0], StatusCode::kInvalidArgument, {"rank 1 rejected"}));
  // A schedule for another pp size.
  std::vector<Status> ranks =
      CreateWithSizes(2, ScheduleKind::kGPipe, 1, {{{0, 8}}, {{8, 0}}}, /*schedule_ranks=*/1);
  EXPECT_TRUE(StatusIs(ranks[0], StatusCode::kInvalidArgument,
                       {"schedule is for 1 ranks, the group has 2"}));
}

}  // namespace
}  // namespace zs::testing
