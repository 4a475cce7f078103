// The conformance checks can fail: run them against communicators that are wrong on purpose
// (inputs off by 25% on one rank; reductions in the wrong rank order) and expect every
// check to report a wrong element on at least one rank.
#include "tests/runtime/comm/comm_checks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "runtime/comm/backend_registry.h"
#include "tests/runtime/comm/rank_threads.h"

namespace zs::testing {
namespace {

enum class Fault {
  kPerturbInput,  // rank 0's inputs are off by 25%
  kReverseOrder,  // all_reduce sums ranks N-1..0 instead of 0..N-1 (visible in f32 only:
                  // f32 sums of a few bf16/f16 values are mostly exact)
};

// Forwards to a real communicator, with one fault; every operation is blocking.
class FaultyCommunicator final : public Communicator {
 public:
  FaultyCommunicator(std::unique_ptr<Communicator> inner, Fault fault)
      : inner_(std::move(inner)), fault_(fault) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string_view backend_name() const override { return "faulty"; }
  const CommOptions& options() const override { return inner_->options(); }

  CommHandle StartAllGather(const void* send, void* recv, size_t count, DType dtype) override {
    auto copy = Perturbed(send, count, dtype);
    return CommHandle::Completed(inner_->AllGather(copy.data(), recv, count, dtype));
  }
  CommHandle StartReduceScatter(const void* send, void* recv, size_t count, DType dtype,
                                ReduceOp op) override {
    auto copy = Perturbed(send, count * size(), dtype);
    return CommHandle::Completed(inner_->ReduceScatter(copy.data(), recv, count, dtype, op));
  }
  CommHandle StartAllReduce(const void* send, void* recv, size_t count, DType dtype,
                            ReduceOp op) override {
    if (fault_ == Fault::kReverseOrder)
      return CommHandle::Completed(Reversed(send, recv, count, dtype, op));
    auto copy = Perturbed(send, count, dtype);
    return CommHandle::Completed(inner_->AllReduce(copy.data(), recv, count, dtype, op));
  }
  CommHandle StartBroadcast(void* buffer, size_t count, DType dtype, int root) override {
    if (rank() != root) return CommHandle::Completed(inner_->Broadcast(buffer, count, dtype, root));
    auto copy = Perturbed(buffer, count, dtype);
    std::vector<std::byte> scratch = copy;  // the root's own buffer stays intact
    return CommHandle::Completed(inner_->Broadcast(scratch.data(), count, dtype, root));
  }
  CommHandle StartSend(const void* buffer, size_t count, DType dtype, int peer) override {
    auto copy = Perturbed(buffer, count, dtype);
    return CommHandle::Completed(inner_->Send(copy.data(), count, dtype, peer));
  }
  CommHandle StartRecv(void* buffer, size_t count, DType dtype, int peer) override {
    return CommHandle::Completed(inner_->Recv(buffer, count, dtype, peer));
  }
  CommHandle StartAllToAllv(const void* send, std::span<const size_t> send_counts,
                            std::span<const size_t> send_offsets, void* recv,
                            std::span<const size_t> recv_counts,
                            std::span<const size_t> recv_offsets, DType dtype) override {
    size_t end = 0;  // the send buffer's extent, in elements
    for (size_t p = 0; p < send_counts.size(); ++p) {
      end = std::max(end, send_offsets[p] + send_counts[p]);
    }
    auto copy = Perturbed(send, end, dtype);
    return CommHandle::Completed(inner_->AllToAllv(copy.data(), send_counts, send_offsets, recv,
                                                   recv_counts, recv_offsets, dtype));
  }
  CommHandle StartBarrier() override { return CommHandle::Completed(inner_->Barrier()); }
  StatusOr<std::unique_ptr<Communicator>> Split(int, int, std::string) override {
    return UnimplementedError("faulty communicator cannot split");
  }

 private:
  std::vector<std::byte> Perturbed(const void* data, size_t count, DType dtype) const {
    const size_t element = DTypeSize(dtype);
    std::vector<std::byte> copy(count * element);
    if (count > 0) std::memcpy(copy.data(), data, copy.size());
    if (fault_ == Fault::kPerturbInput && rank() == 0) {
      // Every element scaled by 1.25: too large a change for any rounding to hide.
      for (size_t i = 0; i < count; ++i) {
        StoreFromFloat(copy.data(), dtype, i, LoadAsFloat(copy.data(), dtype, i) * 1.25f);
      }
    }
    return copy;
  }

  Status Reversed(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
    const int n = size();
    std::vector<std::byte> all(count * n * DTypeSize(dtype));
    ZS_RETURN_IF_ERROR(inner_->AllGather(send, all.data(), count, dtype));
    for (size_t i = 0; i < count; ++i) {
      float acc = LoadAsFloat(all.data(), dtype, (n - 1) * count + i);
      for (int k = n - 2; k >= 0; --k) {
        const float x = LoadAsFloat(all.data(), dtype, k * count + i);
        acc = op == ReduceOp::kMax ? std::max(acc, x) : acc + x;
      }
      if (op == ReduceOp::kAvg) acc /= float(n);
      StoreFromFloat(recv, dtype, i, acc);
    }
    return OkStatus();
  }

  std::unique_ptr<Communicator> inner_;
  const Fault fault_;
};

// Runs check on `world` faulty local ranks; expects a wrong-data error on at least one rank and
// no other kind of error.
void ExpectDetected(Fault fault, int world, const std::function<Status(Communicator&)>& check) {
  RegisterBuiltinBackends();
  StatusOr<Backend*> local = FindBackend("local");
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  InProcessStore store;
  CommOptions options;
  options.timeout = std::chrono::milliseconds(10'000);
  ConnectedRanks ranks = ConnectRanks(**local, store, world, options);
  std::vector<Status> results = RunOnRanks(world, [&](int r) -> Status {
    if (!ranks.errors[r].ok()) return ranks.errors[r];
    FaultyCommunicator faulty(std::move(ranks.comms[r]), fault);
    return check(faulty);
  });
  int detected = 0;
  for (const Status& s : results) {
    if (s.ok()) continue;
    EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
    EXPECT_NE(s.message().find("reference"), std::string::npos) << s.ToString();
    ++detected;
  }
  EXPECT_GT(detected, 0) << "no rank noticed the fault";
}

TEST(CommChecksTest, DetectAPerturbedInput) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    ExpectDetected(Fault::kPerturbInput, 3,
                   [&](Communicator& c) { return CheckAllReduce(c, 7, dtype, ReduceOp::kSum, 1); });
    ExpectDetected(Fault::kPerturbInput, 3, [&](Communicator& c) {
      return CheckReduceScatter(c, 5, dtype, ReduceOp::kAvg, 2);
    });
    ExpectDetected(Fault::kPerturbInput, 2, [&](Communicator& c) {
      return CheckAllGather(c, 1, dtype, 3, /*in_place=*/true);
    });
    ExpectDetected(Fault::kPerturbInput, 3,
                   [&](Communicator& c) { return CheckBroadcast(c, 9, dtype, 0, 4); });
    ExpectDetected(Fault::kPerturbInput, 2, [&](Communicator& c) {
      return CheckSendRecvRing(c, 11, dtype, 5, /*messages=*/1);
    });
    ExpectDetected(Fault::kPerturbInput, 3,
                   [&](Communicator& c) { return CheckAllToAll(c, 6, dtype, 6); });
    ExpectDetected(Fault::kPerturbInput, 3,
                   [&](Communicator& c) { return CheckAllToAllv(c, 5, dtype, 7); });
  }
}

TEST(CommChecksTest, DetectTheWrongSummationOrder) {
  ExpectDetected(Fault::kReverseOrder, 4, [](Communicator& c) {
    return CheckAllReduce(c, 1001, DType::kF32, ReduceOp::kSum, 6);
  });
}

TEST(CommChecksTest, InputsAreExactNonZeroAndVaried) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    float lo = 1e9f, hi = 0;
    for (size_t i = 0; i < 1000; ++i) {
      const float v = InputValue(i % 4, i, 17, dtype);
      EXPECT_GT(v, 0.0f);
      std::vector<std::byte> stored(DTypeSize(dtype));
      StoreFromFloat(stored.data(), dtype, 0, v);
      EXPECT_EQ(LoadAsFloat(stored.data(), dtype, 0), v) << "not exact in " << DTypeName(dtype);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    EXPECT_GT(hi / lo, 64.0f) << "exponents should vary";
  }
  EXPECT_NE(InputValue(0, 5, 1, DType::kF32), InputValue(1, 5, 1, DType::kF32));
  EXPECT_NE(InputValue(0, 5, 1, DType::kF32), InputValue(0, 5, 2, DType::kF32));
}

}  // namespace
}  // namespace zs::testing
