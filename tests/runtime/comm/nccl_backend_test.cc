// The nccl backend. Without a CUDA device (build machines have no driver) it must say so and
// fail fast; with one it runs single-rank collectives, an init that times out, and, given two
// or more devices, two ranks as threads (one device each: NCCL refuses two ranks per device).
#include "runtime/comm/nccl/nccl_backend.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/comm/backend_registry.h"
#include "runtime/topology/store.h"
#include "tests/runtime/comm/rank_threads.h"

namespace zs {
namespace {

using namespace std::chrono_literals;

int DeviceCount() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

#define ZS_SKIP_WITH_FEWER_DEVICES(n)                            \
  do {                                                           \
    if (DeviceCount() < (n)) {                                   \
      GTEST_SKIP() << "no CUDA device: needs " << (n) << ", "    \
                   << MakeNcclBackend()->Available().ToString(); \
    }                                                            \
  } while (0)

// A device buffer of floats (f32 test data) that frees itself.
class DeviceFloats {
 public:
  explicit DeviceFloats(const std::vector<float>& host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(1, n_) * 4),
              cudaSuccess);
    if (n_ > 0) cudaMemcpy(ptr_, host.data(), n_ * 4, cudaMemcpyHostToDevice);
  }
  ~DeviceFloats() { cudaFree(ptr_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* get() const { return ptr_; }
  std::vector<float> ToHost() const {
    std::vector<float> out(n_);
    if (n_ > 0) cudaMemcpy(out.data(), ptr_, n_ * 4, cudaMemcpyDeviceToHost);
    return out;
  }

 private:
  size_t n_;
  float* ptr_ = nullptr;
};

// Small integers: every sum is exact whatever order NCCL adds in.
std::vector<float> Ramp(size_t n, int rank) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(int(i % 31) + 1 + 100 * rank);
  return v;
}

TEST(NcclBackendTest, IsRegisteredAsABuiltinBackend) {
  RegisterBuiltinBackends();
  StatusOr<Backend*> backend = FindBackend("nccl");
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  EXPECT_EQ((*backend)->name(), "nccl");
}

TEST(NcclBackendTest, AvailabilityMatchesTheDeviceCount) {
  const Status available = MakeNcclBackend()->Available();
  if (DeviceCount() > 0) {
    EXPECT_TRUE(available.ok()) << available.ToString();
  } else {
    EXPECT_EQ(available.code(), StatusCode::kUnavailable);
    EXPECT_NE(available.message().find("cudaGetDeviceCount"), std::string::npos)
        << available.ToString();
  }
}

TEST(NcclBackendTest, ConnectWithoutDeviceFailsAtOnce) {
  if (DeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  InProcessStore store;
  CommOptions options;
  options.timeout = 600s;  // must not be waited for
  StatusOr<std::unique_ptr<Communicator>> comm = MakeNcclBackend()->Connect(store, 0, 1, options);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kUnavailable) << comm.status().ToString();
}

TEST(NcclBackendTest, RejectsBadRanks) {
  InProcessStore store;
  StatusOr<std::unique_ptr<Communicator>> comm =
      MakeNcclBackend()->Connect(store, 2, 2, CommOptions{});
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument) << comm.status().ToString();
}

TEST(NcclBackendTest, SingleRankCollectives) {
  ZS_SKIP_WITH_FEWER_DEVICES(1);
  InProcessStore store;
  CommOptions options;
  options.group_name = "solo";
  options.timeout = 60s;
  StatusOr<std::unique_ptr<Communicator>> connected =
      MakeNcclBackend()->Connect(store, 0, 1, options);
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  Communicator& comm = **connected;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.backend_name(), "nccl");

  const size_t n = 1001;
  const std::vector<float> x = Ramp(n, 0);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    DeviceFloats in(x), out(std::vector<float>(n, -1.f));
    ASSERT_TRUE(comm.AllReduce(in.get(), out.get(), n, DType::kF32, op).ok());
    EXPECT_EQ(out.ToHost(), x) << ReduceOpName(op);
    ASSERT_TRUE(comm.AllReduce(in.get(), in.get(), n, DType::kF32, op).ok());  // in place
    EXPECT_EQ(in.ToHost(), x);
  }
  // bf16 / f16 on the same bytes: with one rank every op returns its input bit for bit.
  for (DType t : {DType::kBF16, DType::kF16}) {
    DeviceFloats in(x), out(std::vector<float>(n, -1.f));
    ASSERT_TRUE(comm.AllReduce(in.get(), out.get(), n / 2, t, ReduceOp::kMax).ok());
    const std::vector<float> got = out.ToHost();
    EXPECT_EQ(std::memcmp(got.data(), x.data(), (n / 2) * 2), 0) << DTypeName(t);
  }
  {
    DeviceFloats in(x), out(std::vector<float>(n, -1.f));
    ASSERT_TRUE(comm.AllGather(in.get(), out.get(), n, DType::kF32).ok());
    EXPECT_EQ(out.ToHost(), x);
    DeviceFloats rs(std::vector<float>(n, -1.f));
    ASSERT_TRUE(comm.ReduceScatter(in.get(), rs.get(), n, DType::kF32, ReduceOp::kSum).ok());
    EXPECT_EQ(rs.ToHost(), x);
    ASSERT_TRUE(comm.Broadcast(in.get(), n, DType::kF32, 0).ok());
    EXPECT_EQ(in.ToHost(), x);
  }
  EXPECT_TRUE(comm.Barrier().ok());
  EXPECT_TRUE(comm.AllReduce(nullptr, nullptr, 0, DType::kF32, ReduceOp::kSum).ok());

  // Argument errors never reach NCCL and leave the communicator usable.
  EXPECT_EQ(comm.AllReduce(nullptr, nullptr, 4, DType::kF32, ReduceOp::kSum).code(),
            StatusCode::kInvalidArgument);
  DeviceFloats buf(x);
  EXPECT_EQ(comm.Send(buf.get(), n, DType::kF32, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Recv(buf.get(), n, DType::kF32, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Broadcast(buf.get(), n, DType::kF32, 3).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm.Barrier().ok());

  // Split: color 0 keeps the rank in a group of one; a negative color opts out.
  StatusOr<std::unique_ptr<Communicator>> child = comm.Split(0, 0, "solo.child");
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  ASSERT_NE(*child, nullptr);
  EXPECT_EQ((*child)->size(), 1);
  EXPECT_EQ((*child)->group_name(), "solo.child");
  EXPECT_TRUE((*child)->Barrier().ok());
  child->reset();
  StatusOr<std::unique_ptr<Communicator>> none = comm.Split(-1, 0, "solo.none");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, nullptr);
}

// All-to-all on one rank: its own block moves (grouped ncclSend/ncclRecv to itself), offsets
// honoured, zero counts fine, layout errors rejected before NCCL.
TEST(NcclBackendTest, SingleRankAllToAll) {
  ZS_SKIP_WITH_FEWER_DEVICES(1);
  InProcessStore store;
  CommOptions options;
  options.group_name = "solo_a2a";
  options.timeout = 60s;
  StatusOr<std::unique_ptr<Communicator>> connected =
      MakeNcclBackend()->Connect(store, 0, 1, options);
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  Communicator& comm = **connected;
  const std::vector<float> x = Ramp(64, 0);
  DeviceFloats in(x), out(std::vector<float>(64, -1.f));
  ASSERT_TRUE(comm.AllToAll(in.get(), out.get(), 64, DType::kF32).ok());
  EXPECT_EQ(out.ToHost(), x);
  const size_t counts[] = {10}, send_offsets[] = {5}, recv_offsets[] = {40};
  DeviceFloats moved(std::vector<float>(64, -1.f));
  ASSERT_TRUE(
      comm.AllToAllv(in.get(), counts, send_offsets, moved.get(), counts, recv_offsets, DType::kF32)
          .ok());
  const std::vector<float> got = moved.ToHost();
  for (size_t i = 0; i < 64; ++i) {
    EXPECT_EQ(got[i], i >= 40 && i < 50 ? x[i - 35] : -1.f) << i;
  }
  const size_t zero[] = {0};
  EXPECT_TRUE(comm.AllToAllv(nullptr, zero, zero, nullptr, zero, zero, DType::kBF16).ok());
  EXPECT_EQ(comm.AllToAll(in.get(), in.get(), 8, DType::kF32).code(), StatusCode::kInvalidArgument);
  const size_t two[] = {1, 1};
  EXPECT_EQ(comm.AllToAllv(in.get(), two, two, out.get(), two, two, DType::kF32).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm.Barrier().ok());
}

// Two ranks: even and uneven all-to-all, a zero count in one direction.
TEST(NcclBackendTest, TwoRanksAllToAll) {
  ZS_SKIP_WITH_FEWER_DEVICES(2);
  InProcessStore store;
  CommOptions options;
  options.group_name = "pair_a2a";
  options.timeout = 30s;
  std::unique_ptr<Backend> backend = MakeNcclBackend();
  testing::ConnectedRanks ranks = testing::ConnectRanks(*backend, store, 2, options);
  for (const Status& s : ranks.errors) ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<Status> results = testing::RunOnRanks(2, [&](int rank) -> Status {
    Communicator& comm = *ranks.comms[rank];
    cudaSetDevice(rank);
    const std::vector<float> mine = Ramp(200, rank);
    DeviceFloats in(mine), out(std::vector<float>(200, -1.f));
    ZS_RETURN_IF_ERROR(comm.AllToAll(in.get(), out.get(), 100, DType::kF32));
    const std::vector<float> r0 = Ramp(200, 0), r1 = Ramp(200, 1), got = out.ToHost();
    for (size_t i = 0; i < 100; ++i) {
      const float from0 = r0[size_t(rank) * 100 + i], from1 = r1[size_t(rank) * 100 + i];
      if (got[i] != from0 || got[100 + i] != from1)
        return InternalError("all_to_all differs at " + std::to_string(i));
    }
    // Uneven: rank 0 sends 7 to rank 1, rank 1 sends nothing to rank 0; own blocks of 3.
    const std::vector<size_t> sc =
        rank == 0 ? std::vector<size_t>{3, 7} : std::vector<size_t>{0, 3};
    const std::vector<size_t> rc =
        rank == 0 ? std::vector<size_t>{3, 0} : std::vector<size_t>{7, 3};
    const std::vector<size_t> offsets = {0, 50};
    DeviceFloats v(std::vector<float>(200, -1.f));
    ZS_RETURN_IF_ERROR(comm.AllToAllv(in.get(), sc, offsets, v.get(), rc, offsets, DType::kF32));
    const std::vector<float> w = v.ToHost();
    if (rank == 1) {
      for (size_t i = 0; i < 7; ++i) {
        if (w[i] != r0[50 + i]) return InternalError("all_to_all_v from rank 0 differs");
      }
    }
    return OkStatus();
  });
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  ranks.comms.clear();
}

TEST(NcclBackendTest, InitTimesOutWhenARankNeverJoins) {
  ZS_SKIP_WITH_FEWER_DEVICES(1);
  InProcessStore store;
  CommOptions options;
  options.group_name = "half";
  options.timeout = 3s;
  // Rank 1 of 2 never calls Connect: rank 0's initialisation must be aborted, not hang.
  StatusOr<std::unique_ptr<Communicator>> comm = MakeNcclBackend()->Connect(store, 0, 2, options);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kDeadlineExceeded) << comm.status().ToString();
  EXPECT_NE(comm.status().message().find("'half'"), std::string::npos);
}

TEST(NcclBackendTest, TwoRanksReduceSendAndTimeOut) {
  ZS_SKIP_WITH_FEWER_DEVICES(2);
  InProcessStore store;
  CommOptions options;
  options.group_name = "pair";
  options.timeout = 5s;
  std::unique_ptr<Backend> backend = MakeNcclBackend();
  testing::ConnectedRanks ranks = testing::ConnectRanks(*backend, store, 2, options);
  for (const Status& s : ranks.errors) ASSERT_TRUE(s.ok()) << s.ToString();

  const size_t n = 4099;
  std::vector<Status> results = testing::RunOnRanks(2, [&](int rank) -> Status {
    Communicator& comm = *ranks.comms[rank];
    cudaSetDevice(rank);
    DeviceFloats x(Ramp(n, rank)), y(std::vector<float>(n, 0.f));
    ZS_RETURN_IF_ERROR(comm.AllReduce(x.get(), y.get(), n, DType::kF32, ReduceOp::kSum));
    const std::vector<float> a = Ramp(n, 0), b = Ramp(n, 1), got = y.ToHost();
    for (size_t i = 0; i < n; ++i) {
      if (got[i] != a[i] + b[i])
        return InternalError("all_reduce sum differs at " + std::to_string(i));
    }
    // Rank 0 sends its ramp; rank 1 receives it.
    if (rank == 0) {
      ZS_RETURN_IF_ERROR(comm.Send(x.get(), n, DType::kF32, 1));
    } else {
      ZS_RETURN_IF_ERROR(comm.Recv(y.get(), n, DType::kF32, 0));
      if (y.ToHost() != a) return InternalError("recv got the wrong data");
    }
    // Rank 1 skips this all-reduce: rank 0 must fail within the timeout, and stay broken.
    if (rank == 0) {
      Status s = comm.AllReduce(x.get(), y.get(), n, DType::kF32, ReduceOp::kSum);
      if (s.code() != StatusCode::kDeadlineExceeded)
        return InternalError("expected deadline: " + s.ToString());
      if (comm.Barrier().code() != StatusCode::kAborted) return InternalError("expected aborted");
    }
    return OkStatus();
  });
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  ranks.comms.clear();
}

}  // namespace
}  // namespace zs
