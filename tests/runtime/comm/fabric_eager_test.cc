// Eager sends in the fabric backend ([Note: eager sizes] in fabric_endpoint.cc): the rendezvous
// threshold is the provider's eager size (tcp;ofi_rxm: rxm's bounce-buffer size, read from the
// endpoint; shm: its inject size), ZS_FABRIC_EAGER_BYTES only lowers it, and messages at and
// around the threshold, many in flight, arrive complete and in order also when every one of
// them reaches the receiver before its receive is posted (unexpected), on two communicators of
// one endpoint. Ranks as threads of this process, 2 ranks, over tcp and shm.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include "runtime/comm/fabric/fabric_backend.h"
#include "runtime/comm/fabric/fabric_communicator.h"
#include "runtime/comm/fabric/fabric_endpoint.h"
#include "tests/runtime/comm/comm_checks.h"
#include "tests/runtime/comm/rank_threads.h"

namespace zs::testing {
namespace {

// rxm's bounce-buffer size for this process, set before libfabric first reads it (the first
// fi_getinfo, in SetUpTestSuite) unless the caller set one: not the default (16384), so that
// the test sees the threshold follow the provider's setting.
constexpr const char* kRxmBufferSizeVariable = "FI_OFI_RXM_BUFFER_SIZE";
constexpr const char* kRxmBufferSize = "8192";

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

class FabricEagerTest : public ::testing::TestWithParam<const char*> {
 protected:
  static void SetUpTestSuite() { ::setenv(kRxmBufferSizeVariable, kRxmBufferSize, 0); }

  void SetUp() override {
    backend_ = MakeFabricBackend();
    Status available = backend_->Available();
    if (!available.ok()) GTEST_SKIP() << available.ToString();
  }

  // Connects 2 ranks over GetParam(); every rank must connect.
  ConnectedRanks Connect(int timeout_ms = 30'000) {
    CommOptions options;
    options.transport = GetParam();
    options.timeout = std::chrono::milliseconds(timeout_ms);
    ConnectedRanks ranks = ConnectRanks(*backend_, store_, 2, options);
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(ranks.errors[r].ok()) << "rank " << r << ": " << ranks.errors[r].ToString();
    }
    return ranks;
  }

  static size_t Threshold(const ConnectedRanks& ranks, int r) {
    auto* fabric = dynamic_cast<FabricCommunicator*>(ranks.comms[r].get());
    return fabric != nullptr ? fabric->rendezvous_bytes() : 0;
  }

  // The eager size the provider should report: rxm's bounce-buffer size as set in the
  // environment (capped as the endpoint caps it), or shm's inject size from fi_info.
  size_t ExpectedEagerSize() {
    if (std::string(GetParam()) == "shm") {
      auto endpoint = FabricEndpoint::Open("shm", true, 1);
      EXPECT_TRUE(endpoint.ok()) << endpoint.status().ToString();
      return endpoint.ok() ? (*endpoint)->inject_size() : 0;
    }
    const size_t configured = std::strtoull(std::getenv(kRxmBufferSizeVariable), nullptr, 10);
    return std::min(configured, kFabricMaxEagerBytes);
  }

  std::unique_ptr<Backend> backend_;
  InProcessStore store_;
};

// Message m of a test: `elements` f32 values that no other message shares.
std::vector<float> Message(int m, size_t elements) {
  std::vector<float> data(elements);
  for (size_t i = 0; i < elements; ++i) data[i] = InputValue(0, i, 1000 + uint32_t(m), DType::kF32);
  return data;
}

// Waits for every handle (none may be destroyed unwaited); returns the first error.
Status WaitAll(std::vector<CommHandle>& handles) {
  Status first;
  for (CommHandle& h : handles) {
    Status s = h.Wait();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

Status CheckMessage(const std::vector<float>& got, int m, const char* what) {
  const std::vector<float> want = Message(m, got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return InternalError(fmt::format("{}: message {} ({} bytes) element {} is {}, expected {} "
                                       "(lost, or another message's data)",
                                       what, m, got.size() * 4, i, got[i], want[i]));
    }
  }
  return OkStatus();
}

TEST_P(FabricEagerTest, ThresholdIsTheProvidersEagerSize) {
  const size_t expected = ExpectedEagerSize();
  {
    ConnectedRanks ranks = Connect();
    ASSERT_TRUE(ranks.comms[0] && ranks.comms[1]);
    EXPECT_EQ(Threshold(ranks, 0), expected);
    EXPECT_EQ(Threshold(ranks, 1), expected);
  }
  {
    // The knob lowers the threshold, and the ranks agree on the smallest value published.
    ScopedEnv knob("ZS_FABRIC_EAGER_BYTES", "1000");
    ConnectedRanks ranks = Connect();
    ASSERT_TRUE(ranks.comms[0] && ranks.comms[1]);
    EXPECT_EQ(Threshold(ranks, 0), 1000u);
    EXPECT_EQ(Threshold(ranks, 1), 1000u);
  }
  {
    // ... but never raises it past what the provider sends eagerly.
    ScopedEnv knob("ZS_FABRIC_EAGER_BYTES", "1048576");
    ConnectedRanks ranks = Connect();
    ASSERT_TRUE(ranks.comms[0] && ranks.comms[1]);
    EXPECT_EQ(Threshold(ranks, 0), expected);
  }
  {
    ScopedEnv knob("ZS_FABRIC_EAGER_BYTES", "-1");
    CommOptions options;
    options.transport = GetParam();
    InProcessStore store;
    auto comm = backend_->Connect(store, 0, 1, options);
    ASSERT_FALSE(comm.ok());
    EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(comm.status().message().find("ZS_FABRIC_EAGER_BYTES=-1"), std::string::npos)
        << comm.status().ToString();
  }
}

// Rank 0 sends messages at and below the threshold on the world communicator and on a child
// split from it, and waits for every send before rank 1 has posted a single receive: eager
// sends must complete unmatched (with a clear-to-send they would wait until the timeout). Rank
// 1 then receives the child's messages first, then the world's; every message must arrive
// whole and in its pair's start order.
TEST_P(FabricEagerTest, UnmatchedEagerSendsCompleteAndArriveInOrder) {
  ConnectedRanks ranks = Connect(/*timeout_ms=*/5'000);
  ASSERT_TRUE(ranks.comms[0] && ranks.comms[1]);
  const size_t t = Threshold(ranks, 0);
  ASSERT_GE(t, 64u);
  // Bytes of each message (multiples of 4): tiny, mid-size, just below and at the threshold.
  const std::vector<size_t> sizes = {64, 1024, t / 2, t - 4, t, 4 * 1000, t - 64};
  constexpr int kPerComm = 32;
  std::promise<Status> sends_done;
  std::shared_future<Status> sends_done_future = sends_done.get_future().share();
  std::vector<Status> results = RunOnRanks(2, [&](int r) -> Status {
    Communicator& world = *ranks.comms[r];
    ZS_ASSIGN_OR_RETURN(auto child, world.Split(0, r, "eager child"));
    Communicator* comms[2] = {&world, child.get()};
    if (r == 0) {
      std::vector<std::vector<float>> out;
      std::vector<CommHandle> handles;
      for (int m = 0; m < 2 * kPerComm; ++m) {
        out.push_back(Message(m, sizes[m % sizes.size()] / 4));
      }
      for (int m = 0; m < 2 * kPerComm; ++m) {
        handles.push_back(comms[m % 2]->StartSend(out[m].data(), out[m].size(), DType::kF32, 1));
      }
      Status status = WaitAll(handles);
      sends_done.set_value(status);
      ZS_RETURN_IF_ERROR(status.WithContext("rank 0's eager sends, before any receive"));
    } else {
      // Waits for rank 0's sends (bounded: they fail by the timeout if they need a receive).
      if (sends_done_future.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
        return DeadlineExceededError("rank 0's sends neither completed nor failed");
      }
      for (int c : {1, 0}) {
        std::vector<std::vector<float>> in;
        std::vector<CommHandle> handles;
        for (int m = c; m < 2 * kPerComm; m += 2) {
          in.emplace_back(sizes[m % sizes.size()] / 4, -1.f);
        }
        for (auto& buffer : in) {
          handles.push_back(comms[c]->StartRecv(buffer.data(), buffer.size(), DType::kF32, 0));
        }
        ZS_RETURN_IF_ERROR(WaitAll(handles));
        for (size_t k = 0; k < in.size(); ++k) {
          ZS_RETURN_IF_ERROR(CheckMessage(in[k], c + 2 * int(k), c ? "child" : "world"));
        }
      }
    }
    return world.Barrier();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
  }
}

// Both ranks start many sends of sizes on both sides of the threshold (eager and handshake
// interleaved in one pair's order), then their receives, then wait: every message arrives whole
// and in start order; then the collectives' shared checks at counts around the threshold.
TEST_P(FabricEagerTest, MixedSizesAroundTheThresholdKeepTheirOrder) {
  ConnectedRanks ranks = Connect();
  ASSERT_TRUE(ranks.comms[0] && ranks.comms[1]);
  const size_t t = Threshold(ranks, 0);
  const std::vector<size_t> sizes = {t + 4, t, 1024, t - 4, 2 * t + 8, 64, t + 64, 3 * t};
  constexpr int kMessages = 48;
  std::vector<Status> results = RunOnRanks(2, [&](int r) -> Status {
    Communicator& comm = *ranks.comms[r];
    const int peer = 1 - r;
    std::vector<std::vector<float>> out, in;
    for (int m = 0; m < kMessages; ++m) {
      const size_t elements = sizes[(m + r) % sizes.size()] / 4;
      out.push_back(Message(2 * m + r, elements));
      in.emplace_back(sizes[(m + peer) % sizes.size()] / 4, -1.f);
    }
    std::vector<CommHandle> handles;
    for (auto& buffer : out) {
      handles.push_back(comm.StartSend(buffer.data(), buffer.size(), DType::kF32, peer));
    }
    for (auto& buffer : in) {
      handles.push_back(comm.StartRecv(buffer.data(), buffer.size(), DType::kF32, peer));
    }
    ZS_RETURN_IF_ERROR(WaitAll(handles));
    for (int m = 0; m < kMessages; ++m) {
      ZS_RETURN_IF_ERROR(CheckMessage(in[m], 2 * m + peer, "mixed"));
    }
    // Collectives whose blocks straddle the threshold (counts in f32 elements per rank).
    for (size_t count : {t / 4 - 1, t / 4, t / 4 + 1, t / 2 + 3}) {
      ZS_RETURN_IF_ERROR(CheckAllGather(comm, count, DType::kF32, 7));
      ZS_RETURN_IF_ERROR(CheckReduceScatter(comm, count, DType::kF32, ReduceOp::kSum, 8));
      ZS_RETURN_IF_ERROR(CheckAllReduce(comm, 2 * count, DType::kBF16, ReduceOp::kSum, 9));
      ZS_RETURN_IF_ERROR(CheckBroadcast(comm, count, DType::kF32, 1, 10));
      ZS_RETURN_IF_ERROR(CheckAllToAll(comm, count, DType::kF32, 11));
    }
    return OkStatus();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Fabric, FabricEagerTest, ::testing::Values("tcp", "shm"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace zs::testing
