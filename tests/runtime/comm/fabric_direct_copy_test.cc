// Direct copy in the fabric backend ([Note: direct copy] in fabric_stream_set.h): when it is on
// (ranks of one host over shm) and off (the knob, tcp), every collective still matches the
// shared checks; counts that differ above the inject size fail with InvalidArgument on both
// sides of the pair; ReadPeerMemory and its probe report what they cannot read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/comm/fabric/fabric_backend.h"
#include "runtime/comm/fabric/fabric_communicator.h"
#include "runtime/comm/fabric/fabric_peer.h"
#include "tests/runtime/comm/comm_checks.h"
#include "tests/runtime/comm/rank_threads.h"

namespace zs::testing {
namespace {

// Sets an environment variable for the life of the object (the backend reads it at Connect).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

class FabricDirectCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = MakeFabricBackend();
    Status available = backend_->Available();
    if (!available.ok()) GTEST_SKIP() << available.ToString();
  }

  ConnectedRanks Connect(int world, const char* transport, int timeout_ms = 30'000) {
    CommOptions options;
    options.transport = transport;
    options.timeout = std::chrono::milliseconds(timeout_ms);
    ConnectedRanks ranks = ConnectRanks(*backend_, store_, world, options);
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(ranks.errors[r].ok()) << "rank " << r << ": " << ranks.errors[r].ToString();
    }
    return ranks;
  }

  static bool DirectCopy(const ConnectedRanks& ranks, int r) {
    auto* fabric = dynamic_cast<FabricCommunicator*>(ranks.comms[r].get());
    return fabric != nullptr && fabric->direct_copy();
  }

  // Every kind of collective past one segment, and a ring of sends (sizes count, count/2+1, 0).
  static Status CheckTraffic(Communicator& comm, size_t count) {
    ZS_RETURN_IF_ERROR(CheckAllReduce(comm, count, DType::kF32, ReduceOp::kSum, 1));
    ZS_RETURN_IF_ERROR(CheckAllReduce(comm, count, DType::kBF16, ReduceOp::kMax, 2, true));
    ZS_RETURN_IF_ERROR(CheckAllGather(comm, count, DType::kF32, 3));
    ZS_RETURN_IF_ERROR(CheckAllGather(comm, count, DType::kF16, 4, true));
    ZS_RETURN_IF_ERROR(CheckReduceScatter(comm, count, DType::kF32, ReduceOp::kAvg, 5));
    ZS_RETURN_IF_ERROR(CheckBroadcast(comm, count, DType::kF32, comm.size() - 1, 6));
    ZS_RETURN_IF_ERROR(CheckAllToAll(comm, count, DType::kF32, 7));
    ZS_RETURN_IF_ERROR(CheckAllToAllv(comm, count, DType::kF32, 8));
    ZS_RETURN_IF_ERROR(CheckSendRecvRing(comm, count, DType::kF32, 9));
    return CheckManyInFlight(comm, count / 4, 10);
  }

  void RunTraffic(int world, const char* transport, bool expect_direct, size_t count) {
    ConnectedRanks ranks = Connect(world, transport);
    for (int r = 0; r < world; ++r) {
      ASSERT_NE(ranks.comms[r], nullptr);
      EXPECT_EQ(DirectCopy(ranks, r), expect_direct) << "rank " << r;
    }
    std::vector<Status> results =
        RunOnRanks(world, [&](int r) { return CheckTraffic(*ranks.comms[r], count); });
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
    }
  }

  std::unique_ptr<Backend> backend_;
  InProcessStore store_;
};

// 300'001 elements: past one 1 MiB segment and past the 4 KiB inject size, uneven blocks.
constexpr size_t kCount = 300'001;

TEST_F(FabricDirectCopyTest, OnForShmRanksOfOneHost) { RunTraffic(3, "shm", true, kCount); }

TEST_F(FabricDirectCopyTest, OffWithTheKnob) {
  ScopedEnv off("ZS_FABRIC_DIRECT_COPY", "0");
  RunTraffic(3, "shm", false, kCount);
}

TEST_F(FabricDirectCopyTest, OffOverTcp) { RunTraffic(2, "tcp", false, 70'001); }

TEST_F(FabricDirectCopyTest, SmallSegmentsCycleTheSlots) {
  // 4 KiB + 64 B segments everywhere: descriptors and done words far outnumber the window.
  ScopedEnv segment("ZS_FABRIC_SEGMENT_BYTES", "4160");
  ScopedEnv direct("ZS_FABRIC_DIRECT_SEGMENT_BYTES", "4160");
  ScopedEnv window("ZS_FABRIC_WINDOW", "2");
  RunTraffic(4, "shm", true, 40'003);
}

TEST_F(FabricDirectCopyTest, DirectWindowAtItsBounds) {
  // Small segments, so that streams have many: one descriptor in flight per stream (below the
  // common window of 2, which then applies), and 1024 (every segment of a stream described at
  // once; the reductions' receiving side stays bounded by their ring of 2).
  ScopedEnv segment("ZS_FABRIC_SEGMENT_BYTES", "8192");
  ScopedEnv direct("ZS_FABRIC_DIRECT_SEGMENT_BYTES", "8192");
  ScopedEnv window("ZS_FABRIC_WINDOW", "2");
  for (const char* direct_window : {"1", "1024"}) {
    SCOPED_TRACE(direct_window);
    ScopedEnv knob("ZS_FABRIC_DIRECT_WINDOW", direct_window);
    RunTraffic(3, "shm", true, 70'001);
  }
}

TEST_F(FabricDirectCopyTest, DirectWindowOutOfRangeIsAnError) {
  for (const char* bad : {"0", "1025"}) {
    ScopedEnv knob("ZS_FABRIC_DIRECT_WINDOW", bad);
    CommOptions options;
    options.transport = "shm";
    ConnectedRanks ranks = ConnectRanks(*backend_, store_, 1, options);
    EXPECT_EQ(ranks.errors[0].code(), StatusCode::kInvalidArgument) << ranks.errors[0].ToString();
    EXPECT_NE(ranks.errors[0].message().find(std::string("ZS_FABRIC_DIRECT_WINDOW=") + bad),
              std::string::npos)
        << ranks.errors[0].ToString();
  }
}

TEST_F(FabricDirectCopyTest, MismatchedLargeCountsFailOnBothSides) {
  ConnectedRanks ranks = Connect(2, "shm", 5'000);
  ASSERT_TRUE(DirectCopy(ranks, 0));
  std::vector<Status> results = RunOnRanks(2, [&](int r) -> Status {
    const size_t count = r == 0 ? 300'000 : 200'000;  // 1.2 MB and 0.8 MB blocks
    std::vector<float> in(count, 1.f), out(count * 2, 0.f);
    return ranks.comms[r]->AllGather(in.data(), out.data(), count, DType::kF32);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].code(), StatusCode::kInvalidArgument) << results[r].ToString();
    EXPECT_NE(results[r].message().find("different counts"), std::string::npos)
        << results[r].ToString();
    EXPECT_NE(results[r].message().find("all_gather"), std::string::npos)
        << results[r].ToString();
  }
}

TEST_F(FabricDirectCopyTest, MismatchedSendRecvFailsOnBothSides) {
  ConnectedRanks ranks = Connect(2, "shm", 5'000);
  ASSERT_TRUE(DirectCopy(ranks, 0));
  std::vector<Status> results = RunOnRanks(2, [&](int r) -> Status {
    std::vector<float> data(r == 0 ? 100'000 : 50'000, 1.f);
    return r == 0 ? ranks.comms[0]->Send(data.data(), data.size(), DType::kF32, 1)
                  : ranks.comms[1]->Recv(data.data(), data.size(), DType::kF32, 0);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].code(), StatusCode::kInvalidArgument) << results[r].ToString();
  }
  EXPECT_NE(results[1].message().find("400000"), std::string::npos) << results[1].ToString();
  EXPECT_NE(results[0].message().find("200000"), std::string::npos) << results[0].ToString();
}

TEST(FabricPeerMemory, ReadsThisProcessAndNamesWhatItCannotRead) {
  std::vector<char> source(100'000), copy(100'000, 0);
  for (size_t i = 0; i < source.size(); ++i) source[i] = char(i * 31);
  ASSERT_TRUE(ReadPeerMemory(getpid(), copy.data(), reinterpret_cast<uint64_t>(source.data()),
                             source.size())
                  .ok());
  EXPECT_EQ(copy, source);
  EXPECT_TRUE(PeerMemoryReadable(getpid(), PeerMemoryProbeAddress()));
  EXPECT_FALSE(PeerMemoryReadable(getpid(), PeerMemoryProbeAddress() + 8));
  Status unreadable = ReadPeerMemory(getpid(), copy.data(), 8, 16);  // page 0 is never mapped
  EXPECT_EQ(unreadable.code(), StatusCode::kUnavailable);
  EXPECT_NE(unreadable.message().find(std::to_string(getpid())), std::string::npos)
      << unreadable.ToString();
}

}  // namespace
}  // namespace zs::testing
