// The conformance suite over every communication backend of this build: for each backend in
// {local, fabric over shm, fabric over tcp} that is registered and available here, and world
// sizes 1..4, ranks are threads of this process connected through one InProcessStore, and every
// check of comm_checks.h must hold on every rank.
#include <gtest/gtest.h>

#include <atomic>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/comm/backend_registry.h"
#include "tests/runtime/comm/comm_checks.h"
#include "tests/runtime/comm/rank_threads.h"

namespace zs::testing {
namespace {

struct BackendCase {
  const char* backend;
  const char* transport;  // CommOptions::transport
};

struct ConformanceParam {
  BackendCase backend;
  int world;
};

void PrintTo(const ConformanceParam& p, std::ostream* os) {
  *os << p.backend.backend << (p.backend.transport[0] != '\0' ? "/" : "") << p.backend.transport
      << " with " << p.world << " ranks";
}

std::string ParamName(const ::testing::TestParamInfo<ConformanceParam>& info) {
  std::string name = info.param.backend.backend;
  if (info.param.backend.transport[0] != '\0')
    name += std::string("_") + info.param.backend.transport;
  return name + "_w" + std::to_string(info.param.world);
}

class CommConformanceTest : public ::testing::TestWithParam<ConformanceParam> {
 protected:
  void SetUp() override {
    RegisterBuiltinBackends();
    const BackendCase& c = GetParam().backend;
    StatusOr<Backend*> found = FindBackend(c.backend);
    if (!found.ok()) GTEST_SKIP() << "backend not built: " << found.status().ToString();
    Status available = (*found)->Available();
    if (!available.ok()) GTEST_SKIP() << c.backend << " not available: " << available.ToString();
    backend_ = *found;
  }

  // Connects the ranks, runs body on each rank's thread, then a barrier; expects OK everywhere.
  void RunRanks(const std::function<Status(Communicator&)>& body) {
    const int world = GetParam().world;
    CommOptions options;
    // Long enough for any healthy operation under sanitizers; short enough that a hang costs
    // seconds, not minutes.
    options.timeout = std::chrono::milliseconds(10'000);
    options.group_name = "conformance";
    options.transport = GetParam().backend.transport;
    InProcessStore store;
    ConnectedRanks ranks = ConnectRanks(*backend_, store, world, options);
    bool all_unavailable = true;
    for (const Status& s : ranks.errors) {
      all_unavailable = all_unavailable && s.code() == StatusCode::kUnavailable;
    }
    if (all_unavailable) GTEST_SKIP() << "cannot connect here: " << ranks.errors[0].ToString();
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(ranks.errors[r].ok())
          << "connect rank " << r << ": " << ranks.errors[r].ToString();
    }
    std::vector<Status> results = RunOnRanks(world, [&](int r) -> Status {
      Communicator& comm = *ranks.comms[r];
      ZS_RETURN_IF_ERROR(body(comm));
      return comm.Barrier().WithContext("closing barrier");
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
    }
  }

  Backend* backend_ = nullptr;
};

TEST_P(CommConformanceTest, AllChecks) {
  RunRanks([](Communicator& c) { return RunAllCommChecks(c); });
}

// Counts that are multiples of neither the world size nor any vector width, in place and not,
// each dtype with a different op (the small sizes of AllChecks cover every combination).
TEST_P(CommConformanceTest, LargeUnevenCounts) {
  RunRanks([](Communicator& comm) -> Status {
    uint32_t seed = 5000;
    const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF16};
    const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};
    for (int d = 0; d < 3; ++d) {
      const DType dtype = dtypes[d];
      const ReduceOp op = ops[d], other = ops[(d + 1) % 3];
      ZS_RETURN_IF_ERROR(CheckAllReduce(comm, 65537, dtype, op, seed++));
      ZS_RETURN_IF_ERROR(CheckAllReduce(comm, 16411, dtype, other, seed++, /*in_place=*/true));
      ZS_RETURN_IF_ERROR(CheckReduceScatter(comm, 16411, dtype, op, seed++));
      ZS_RETURN_IF_ERROR(CheckReduceScatter(comm, 4099, dtype, other, seed++, /*in_place=*/true));
      ZS_RETURN_IF_ERROR(CheckAllGather(comm, 16411, dtype, seed++));
      ZS_RETURN_IF_ERROR(CheckAllGather(comm, 4099, dtype, seed++, /*in_place=*/true));
      ZS_RETURN_IF_ERROR(CheckReduceScatterAllGatherEqualsAllReduce(comm, 4099, dtype, op, seed++));
    }
    return CheckSendRecvRing(comm, 30011, DType::kBF16, seed, /*messages=*/5);
  });
}

TEST_P(CommConformanceTest, ManyOperationsInFlight) {
  RunRanks([](Communicator& comm) -> Status {
    ZS_RETURN_IF_ERROR(CheckManyInFlight(comm, 1, 7000, 16));
    ZS_RETURN_IF_ERROR(CheckManyInFlight(comm, 3001, 8000, 16));
    return CheckManyInFlight(comm, 0, 9000, 16);
  });
}

// No rank leaves a barrier before every rank entered it: each rank bumps a shared counter before
// the barrier and reads it after.
TEST_P(CommConformanceTest, BarrierSeparatesPhases) {
  std::atomic<int> entered{0};
  const int world = GetParam().world;
  RunRanks([&](Communicator& comm) -> Status {
    for (int round = 1; round <= 20; ++round) {
      entered.fetch_add(1);
      ZS_RETURN_IF_ERROR(comm.Barrier());
      const int seen = entered.load();
      if (seen < world * round) {
        return InternalError(fmt::format("rank {} left barrier {} having seen {} of {} entries",
                                         comm.rank(), round, seen, world * round));
      }
      ZS_RETURN_IF_ERROR(comm.Barrier());  // nobody enters round+1 before all have read
    }
    return OkStatus();
  });
}

TEST_P(CommConformanceTest, SplitIntoSubgroups) {
  RunRanks([](Communicator& comm) { return CheckSplit(comm); });
}

TEST_P(CommConformanceTest, ArgumentErrors) {
  RunRanks([](Communicator& comm) { return CheckArgumentErrors(comm); });
}

std::vector<ConformanceParam> AllParams() {
  std::vector<ConformanceParam> params;
  for (BackendCase backend :
       {BackendCase{"local", ""}, BackendCase{"fabric", "shm"}, BackendCase{"fabric", "tcp"}}) {
    for (int world = 1; world <= 4; ++world) params.push_back({backend, world});
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Backends, CommConformanceTest, ::testing::ValuesIn(AllParams()),
                         ParamName);

}  // namespace
}  // namespace zs::testing
