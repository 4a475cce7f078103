// Failure behaviour of the `local` backend: silent ranks, mismatched calls, destroyed peers,
// connect timeouts, point-to-point errors and scratch accounting. Fail-fast cases use a long
// timeout, so a backend that only failed at the deadline would report DeadlineExceeded (and
// fail the code check) instead of passing slowly; no test asserts a duration.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/backend_registry.h"
#include "runtime/comm/local_ranks.h"
#include "tests/runtime/comm/rank_threads.h"

namespace zs::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

constexpr milliseconds kShort{300};
constexpr milliseconds kLong{60'000};

class LocalFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterBuiltinBackends();
    StatusOr<Backend*> found = FindBackend("local");
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    backend_ = *found;
  }

  std::vector<std::unique_ptr<Communicator>> Connect(int world, milliseconds timeout,
                                                     MemoryTracker* tracker = nullptr) {
    CommOptions options;
    options.timeout = timeout;
    options.group_name = "g";
    options.tracker = tracker;
    ConnectedRanks ranks = ConnectRanks(*backend_, store_, world, options);
    for (const Status& s : ranks.errors) EXPECT_TRUE(s.ok()) << s.ToString();
    return std::move(ranks.comms);
  }

  Backend* backend_ = nullptr;
  InProcessStore store_;
};

TEST_F(LocalFailureTest, ConnectTimeoutNamesRanksThatNeverJoined) {
  CommOptions options;
  options.timeout = kShort;
  options.group_name = "dp";
  std::vector<Status> results = RunOnRanks(2, [&](int thread) -> Status {
    const int rank = thread == 0 ? 0 : 2;  // rank 1 of 3 never comes
    return backend_->Connect(store_, rank, 3, options).status();
  });
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("rank(s) 1 never joined"));
    EXPECT_THAT(s.message(), HasSubstr("'dp'"));
  }
}

TEST_F(LocalFailureTest, ConnectRejectsRanksOfAnotherProcess) {
  ASSERT_TRUE(store_.Set("zs/local/world/w2/g0/1", "999999999").ok());  // "rank 1" elsewhere
  CommOptions options;
  options.timeout = kShort;
  StatusOr<std::unique_ptr<Communicator>> comm = backend_->Connect(store_, 0, 2, options);
  EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(comm.status().message(), HasSubstr("999999999"));
}

TEST_F(LocalFailureTest, ConnectingTheSameGroupTwiceGivesTwoGroups) {
  for (int round = 0; round < 2; ++round) {
    auto comms = Connect(2, kLong);
    std::vector<Status> results = RunOnRanks(2, [&](int r) -> Status {
      float v = float(r + 1), sum = 0;
      ZS_RETURN_IF_ERROR(comms[r]->AllReduce(&v, &sum, 1, DType::kF32, ReduceOp::kSum));
      return sum == 3.0f ? OkStatus() : InternalError(fmt::format("sum {}", sum));
    });
    for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

TEST_F(LocalFailureTest, SilentRankIsNamedWithinTheTimeout) {
  auto comms = Connect(3, kShort);
  std::vector<Status> results = RunOnRanks(3, [&](int r) -> Status {
    std::vector<float> in(10, 1.0f), out(10);
    for (int i = 0; i < 2; ++i) {
      ZS_RETURN_IF_ERROR(
          comms[r]->AllReduce(in.data(), out.data(), 10, DType::kF32, ReduceOp::kSum));
    }
    if (r == 2) return OkStatus();  // rank 2 stops participating
    Status third = comms[r]->AllReduce(in.data(), out.data(), 10, DType::kF32, ReduceOp::kSum);
    Status after = comms[r]->Barrier();
    EXPECT_EQ(after.code(), StatusCode::kAborted) << after.ToString();
    EXPECT_THAT(after.message(), HasSubstr("rank 2"));
    return third;
  });
  EXPECT_TRUE(results[2].ok());
  for (int r : {0, 1}) {
    EXPECT_EQ(results[r].code(), StatusCode::kDeadlineExceeded) << results[r].ToString();
    EXPECT_THAT(results[r].message(), HasSubstr("waiting for rank 2"));
    EXPECT_THAT(results[r].message(), HasSubstr("all_reduce"));
    EXPECT_THAT(results[r].message(), HasSubstr("group 'g'"));
  }
}

// Issue 27: train_gpt --world N hands zerostack.comm_timeout_ms to RunLocalRanks. A rank thread
// that stalls before a collective (until both peers gave up, at most 20 s) is named by its
// peers at that timeout, on the world communicator and on a group split from it (the engine's
// process groups are). A timeout that did not reach them would let the collective complete
// once the stalled rank woke: the status checks fail, no duration is asserted.
TEST_F(LocalFailureTest, StalledRankThreadIsNamedAtTheTimeoutGivenToRunLocalRanks) {
  for (bool split : {false, true}) {
    SCOPED_TRACE(split ? "split group" : "world");
    std::atomic<int> gave_up{0};
    std::vector<Status> results(3);
    CommOptions options;
    options.timeout = kShort;
    options.group_name = split ? "stall-split" : "stall";
    Status all = RunLocalRanks(3, options, [&](int r, Communicator& world, MemoryTracker&) {
      std::unique_ptr<Communicator> child;
      Communicator* comm = &world;
      if (split) {
        StatusOr<std::unique_ptr<Communicator>> made = world.Split(0, r, "dp");
        if (!made.ok()) return results[size_t(r)] = made.status();
        child = std::move(*made);
        comm = child.get();
      }
      if (r == 2) {
        for (int i = 0; i < 20'000 && gave_up.load() < 2; ++i) {
          std::this_thread::sleep_for(milliseconds(1));
        }
      }
      std::vector<float> in(10, 1.0f), out(10);
      Status s = comm->AllReduce(in.data(), out.data(), 10, DType::kF32, ReduceOp::kSum);
      if (r != 2) ++gave_up;
      return results[size_t(r)] = s;
    });
    EXPECT_FALSE(all.ok());
    for (int r : {0, 1}) {
      EXPECT_EQ(results[size_t(r)].code(), StatusCode::kDeadlineExceeded)
          << results[size_t(r)].ToString();
      EXPECT_THAT(results[size_t(r)].message(), HasSubstr("timed out after 300 ms"));
      EXPECT_THAT(results[size_t(r)].message(), HasSubstr("rank 2"));
    }
  }
}

struct MismatchCase {
  const char* name;
  std::function<Status(Communicator&, int rank)> call;
  const char* rank0;  // what rank 0's call looks like in the message
  const char* rank1;
};

class LocalMismatchTest : public LocalFailureTest,
                          public ::testing::WithParamInterface<MismatchCase> {};

TEST_P(LocalMismatchTest, NamesBothCallsAndRanks) {
  auto comms = Connect(2, kLong);
  std::vector<Status> results = RunOnRanks(2, [&](int r) { return GetParam().call(*comms[r], r); });
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(std::string("rank 0 called ") + GetParam().rank0));
    EXPECT_THAT(s.message(), HasSubstr(std::string("rank 1 called ") + GetParam().rank1));
  }
}

std::vector<float> g_data(64, 1.0f);

INSTANTIATE_TEST_SUITE_P(
    Local, LocalMismatchTest,
    ::testing::Values(
        MismatchCase{"kind",
                     [](Communicator& c, int r) {
                       std::vector<float> out(64);
                       return r == 0 ? c.AllReduce(g_data.data(), out.data(), 8, DType::kF32,
                                                   ReduceOp::kSum)
                                     : c.AllGather(g_data.data(), out.data(), 8, DType::kF32);
                     },
                     "all_reduce(count=8, f32, sum)", "all_gather(count=8, f32)"},
        MismatchCase{"count",
                     [](Communicator& c, int r) {
                       std::vector<float> out(64);
                       return c.AllReduce(g_data.data(), out.data(), r == 0 ? 8 : 9, DType::kF32,
                                          ReduceOp::kSum);
                     },
                     "all_reduce(count=8", "all_reduce(count=9"},
        MismatchCase{"dtype",
                     [](Communicator& c, int r) {
                       std::vector<float> out(64);
                       return c.AllReduce(g_data.data(), out.data(), 8,
                                          r == 0 ? DType::kF32 : DType::kBF16, ReduceOp::kSum);
                     },
                     "all_reduce(count=8, f32", "all_reduce(count=8, bf16"},
        MismatchCase{"op",
                     [](Communicator& c, int r) {
                       std::vector<float> out(64);
                       return c.ReduceScatter(g_data.data(), out.data(), 4, DType::kF32,
                                              r == 0 ? ReduceOp::kSum : ReduceOp::kMax);
                     },
                     "reduce_scatter(count=4, f32, sum)", "reduce_scatter(count=4, f32, max)"},
        MismatchCase{"root",
                     [](Communicator& c, int r) {
                       std::vector<float> buf(64);
                       return c.Broadcast(buf.data(), 8, DType::kF32, r);
                     },
                     "broadcast(count=8, f32, root=0)", "broadcast(count=8, f32, root=1)"},
        MismatchCase{"barrier_vs_zero_count",
                     [](Communicator& c, int r) {
                       return r == 0 ? c.Barrier() : c.AllGather(nullptr, nullptr, 0, DType::kF16);
                     },
                     "barrier()", "all_gather(count=0, f16)"}),
    [](const ::testing::TestParamInfo<MismatchCase>& info) { return info.param.name; });

TEST_F(LocalFailureTest, DestroyedPeerMakesWaitersFailFast) {
  auto comms = Connect(3, kLong);
  std::vector<float> in(100, 2.0f), out(100);
  // Rank 0 is already waiting when rank 2 goes away; rank 1 arrives after.
  CommHandle waiting =
      comms[0]->StartAllReduce(in.data(), out.data(), 100, DType::kF32, ReduceOp::kSum);
  comms[2].reset();
  Status s0 = waiting.Wait();
  Status s1 = comms[1]->AllReduce(in.data(), out.data(), 100, DType::kF32, ReduceOp::kSum);
  for (const Status& s : {s0, s1}) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("rank 2 of group 'g' is gone"));
  }
}

TEST_F(LocalFailureTest, RecvFromDestroyedPeerFailsFastButSentDataArrives) {
  auto comms = Connect(2, kLong);
  std::vector<float> sent{1, 2, 3}, got(3);
  ASSERT_TRUE(comms[1]->Send(sent.data(), 3, DType::kF32, 0).ok());
  comms[1].reset();
  ASSERT_TRUE(comms[0]->Recv(got.data(), 3, DType::kF32, 1).ok());  // sent before it went
  EXPECT_EQ(got, sent);
  Status s = comms[0]->Recv(got.data(), 3, DType::kF32, 1);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("rank 1"));
}

TEST_F(LocalFailureTest, RecvTimeoutNamesThePeer) {
  auto comms = Connect(2, kShort);
  std::vector<float> got(3);
  Status s = comms[1]->Recv(got.data(), 3, DType::kF32, 0);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("send from rank 0"));
}

TEST_F(LocalFailureTest, MismatchedSendRecvNamesBothRanks) {
  auto comms = Connect(2, kLong);
  std::vector<float> buf(8, 1.0f), got(8);
  ASSERT_TRUE(comms[0]->Send(buf.data(), 5, DType::kF32, 1).ok());  // buffered
  Status s = comms[1]->Recv(got.data(), 7, DType::kF32, 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("rank 0 sent (count=5, f32)"));
  EXPECT_THAT(s.message(), HasSubstr("rank 1 receives (count=7, f32)"));
}

TEST_F(LocalFailureTest, MismatchedSendIntoWaitingRecvFailsBothSides) {
  auto comms = Connect(2, kLong);
  std::vector<float> buf(8, 1.0f), got(8);
  CommHandle recv = comms[1]->StartRecv(got.data(), 7, DType::kF32, 0);
  // Whether the receive is already posted or not, both paths must report the mismatch.
  Status send = comms[0]->Send(buf.data(), 5, DType::kF32, 1);
  Status r = recv.Wait();
  EXPECT_EQ(r.code(), StatusCode::kInvalidArgument) << r.ToString();
  EXPECT_THAT(r.message(), HasSubstr("count=5"));
  EXPECT_THAT(r.message(), HasSubstr("count=7"));
  EXPECT_TRUE(send.ok() || send.code() == StatusCode::kInvalidArgument) << send.ToString();
}

// Sends race with receives (buffered or straight into a waiting receive): order must hold.
TEST_F(LocalFailureTest, ManyMessagesKeepTheirOrder) {
  auto comms = Connect(2, kLong);
  constexpr int kMessages = 300;
  // Sizes differ between neighbours, so a mix-up is a mismatch; big enough that a buffered copy
  // leaves the receiver time to post its next receive meanwhile.
  auto size_of = [](int m) { return m % 5 == 0 ? size_t{0} : size_t(4000 + m % 5); };
  std::vector<Status> results = RunOnRanks(2, [&](int r) -> Status {
    std::vector<std::vector<float>> buffers(kMessages);
    std::vector<CommHandle> handles;
    for (int m = 0; m < kMessages; ++m) {
      buffers[m].assign(size_of(m), r == 0 ? float(m) : -1.0f);
      handles.push_back(r == 0
                            ? comms[0]->StartSend(buffers[m].data(), size_of(m), DType::kF32, 1)
                            : comms[1]->StartRecv(buffers[m].data(), size_of(m), DType::kF32, 0));
    }
    Status first;
    for (CommHandle& h : handles) {
      Status s = h.Wait();
      if (first.ok()) first = s;
    }
    ZS_RETURN_IF_ERROR(first);
    for (int m = 0; m < kMessages; ++m) {
      for (float v : buffers[m]) {
        if (v != float(m)) return InternalError(fmt::format("message {} holds {}", m, v));
      }
    }
    return OkStatus();
  });
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(LocalFailureTest, BufferedSendsAreCountedAsCommBuffers) {
  MemoryTracker tracker0(0), tracker1(1);
  CommOptions options;
  options.timeout = kLong;
  std::vector<MemoryTracker*> trackers{&tracker0, &tracker1};
  std::vector<std::unique_ptr<Communicator>> comms(2);
  std::vector<Status> connected = RunOnRanks(2, [&](int r) -> Status {
    CommOptions o = options;
    o.tracker = trackers[r];
    ZS_ASSIGN_OR_RETURN(comms[r], backend_->Connect(store_, r, 2, o));
    return OkStatus();
  });
  for (const Status& s : connected) ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<uint16_t> data(1000, 7), got(1000);
  ASSERT_TRUE(comms[0]->Send(data.data(), 1000, DType::kBF16, 1).ok());  // no recv posted yet
  EXPECT_EQ(tracker0.Current(MemoryTier::kHost, MemoryCategory::kCommBuffers), 2000);
  ASSERT_TRUE(comms[1]->Recv(got.data(), 1000, DType::kBF16, 0).ok());
  EXPECT_EQ(got, data);
  EXPECT_EQ(tracker0.Current(MemoryTier::kHost, MemoryCategory::kCommBuffers), 0);
  EXPECT_EQ(tracker0.Peak(MemoryTier::kHost, MemoryCategory::kCommBuffers), 2000);
  // A message left unreceived when its sender goes away is no longer counted against it.
  ASSERT_TRUE(comms[0]->Send(data.data(), 10, DType::kBF16, 1).ok());
  EXPECT_EQ(tracker0.Current(MemoryTier::kHost, MemoryCategory::kCommBuffers), 20);
  comms[0].reset();
  EXPECT_EQ(tracker0.Current(MemoryTier::kHost, MemoryCategory::kCommBuffers), 0);
}

TEST_F(LocalFailureTest, LocalArgumentChecks) {
  auto comms = Connect(2, kShort);
  std::vector<float> buf(16);
  Communicator& c = *comms[1];
  EXPECT_EQ(c.StartSend(buf.data(), 4, DType::kF32, 1).Wait().code(),
            StatusCode::kInvalidArgument);  // to itself
  EXPECT_EQ(c.StartRecv(buf.data(), 4, DType::kF32, 1).Wait().code(), StatusCode::kInvalidArgument);
  // Overlapping buffers other than the in-place layout.
  EXPECT_EQ(
      c.StartAllReduce(buf.data(), buf.data() + 1, 4, DType::kF32, ReduceOp::kSum).Wait().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(c.StartAllGather(buf.data(), buf.data(), 4, DType::kF32).Wait().code(),
            StatusCode::kInvalidArgument);  // rank 1's in-place block is buf + 4
  EXPECT_EQ(
      c.StartReduceScatter(buf.data(), buf.data(), 4, DType::kF32, ReduceOp::kSum).Wait().code(),
      StatusCode::kInvalidArgument);  // rank 1's in-place block is buf + 4
  // None of these broke the communicator.
  std::vector<Status> results = RunOnRanks(2, [&](int r) { return comms[r]->Barrier(); });
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace zs::testing
