// zs_demo: one ZeRO-style data-parallel round on N ranks, with every result verified and the
// memory of each rank reported.
//
// What it does, on each rank (stage 2 shape: gradients and optimizer states sharded):
//   1. allocates a full gradient buffer (bf16, as mixed-precision training communicates) and
//      fills it with this rank's deterministic "backward" output;
//   2. reduce-scatters the gradients (avg) into its fp32 gradient shard: rank r owns elements
//      [r*shard, (r+1)*shard) of the padded flat buffer (the parameter count is not a multiple
//      of the world size; the tail is padding);
//   3. steps SGD with momentum on its fp32 master shard and momentum shard;
//   4. all-gathers the updated parameters (bf16) so every rank holds the full model again;
//   5. checks every element against a reference computed from the same inputs without
//      sharding (the rank-ordered f32 sum the Communicator contract specifies), and that an
//      all-reduce of the same gradients gives the same bits as the reduce-scatter;
//   6. prints timings, bus bandwidth, and each rank's peak memory by tier and category next to
//      what the same state would take unsharded.
//
// Ranks are threads with the `local` backend by default:
//   build/bin/zs_demo [--world 4] [--params 25000003] [--steps 3]
// Under the launcher each process is one rank over libfabric:
//   build/bin/zerorun -n 4 --backend fabric build/bin/zs_demo
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/dtype.h"
#include "runtime/base/log.h"
#include "runtime/base/termination_signals.h"
#include "runtime/comm/backend_registry.h"
#include "runtime/comm/connect.h"
#include "runtime/device/device_factory.h"
#include "runtime/topology/launch_info.h"

namespace zs {
namespace {

struct DemoArgs {
  int world = 4;
  int64_t params = 10'000'003;  // deliberately not a multiple of any world size
  int steps = 3;
};

// Rank r's gradient of element i in step s: deterministic, non-zero, different per rank.
float Gradient(int rank, int64_t i, int step) {
  uint32_t h = uint32_t(i) * 2654435761u ^ uint32_t(rank + 1) * 40503u ^ uint32_t(step) * 977u;
  return (float(h % 20011u) - 10005.5f) * 1e-4f;
}
float InitialParam(int64_t i) { return float(int64_t(i % 1999) - 999) * 1e-3f; }

constexpr float kLr = 0.05f, kMomentum = 0.9f;

struct RankReport {
  double reduce_scatter_s = 0, all_gather_s = 0, all_reduce_s = 0;
  int64_t mismatches = 0;
  std::string first_mismatch;
  MemorySnapshot memory;
};

Status RunRank(Communicator& comm, const DemoArgs& args, RankReport& report) {
  const int n = comm.size(), rank = comm.rank();
  const int64_t shard = (args.params + n - 1) / n;  // padded: shard * n >= params
  const int64_t padded = shard * n;
  MemoryTracker& tracker = *comm.options().tracker;
  ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));

  // Full-size bf16 buffers: gradients (communication input) and parameters (gathered output).
  ZS_ASSIGN_OR_RETURN(DeviceBuffer grads, device->Allocate(padded * 2, MemoryTier::kDevice,
                                                           MemoryCategory::kGradients));
  ZS_ASSIGN_OR_RETURN(DeviceBuffer params, device->Allocate(padded * 2, MemoryTier::kDevice,
                                                            MemoryCategory::kParameters));
  // Sharded state: the reduced bf16 gradient shard, fp32 master weights and momentum.
  ZS_ASSIGN_OR_RETURN(DeviceBuffer grad_shard, device->Allocate(shard * 2, MemoryTier::kDevice,
                                                                MemoryCategory::kGradients));
  ZS_ASSIGN_OR_RETURN(DeviceBuffer master, device->Allocate(shard * 4, MemoryTier::kDevice,
                                                            MemoryCategory::kOptimizerStates));
  ZS_ASSIGN_OR_RETURN(DeviceBuffer momentum, device->Allocate(shard * 4, MemoryTier::kDevice,
                                                              MemoryCategory::kOptimizerStates));
  ZS_ASSIGN_OR_RETURN(DeviceBuffer send_shard, device->Allocate(shard * 2, MemoryTier::kDevice,
                                                                MemoryCategory::kCommBuffers));
  ZS_ASSIGN_OR_RETURN(DeviceBuffer check, device->Allocate(padded * 2, MemoryTier::kHost,
                                                           MemoryCategory::kOther));
  auto* g = grads.data_as<BFloat16>();
  auto* p = params.data_as<BFloat16>();
  auto* gs = grad_shard.data_as<BFloat16>();  // bf16 result of the reduce-scatter
  auto* w = master.data_as<float>();
  auto* m = momentum.data_as<float>();
  auto* ar = check.data_as<BFloat16>();
  const int64_t begin = int64_t(rank) * shard;
  for (int64_t j = 0; j < shard; ++j) {
    w[j] = begin + j < args.params ? InitialParam(begin + j) : 0.f;
    m[j] = 0.f;
  }
  // Reference state of the whole model, kept only to verify (not part of the measured run).
  std::vector<float> ref_w(args.params), ref_m(args.params, 0.f);
  for (int64_t i = 0; i < args.params; ++i) ref_w[i] = InitialParam(i);

  using Clock = std::chrono::steady_clock;
  for (int step = 0; step < args.steps; ++step) {
    for (int64_t i = 0; i < padded; ++i) {
      g[i] = FloatToBF16(i < args.params ? Gradient(rank, i, step) : 0.f);
    }
    // Barriers before each timed collective, so a rank still busy verifying the previous step
    // does not count as collective time on the others.
    ZS_RETURN_IF_ERROR(comm.Barrier());
    auto t0 = Clock::now();
    ZS_RETURN_IF_ERROR(comm.ReduceScatter(g, gs, shard, DType::kBF16, ReduceOp::kAvg));
    auto t1 = Clock::now();
    for (int64_t j = 0; j < shard; ++j) {
      m[j] = kMomentum * m[j] + BF16ToFloat(gs[j]);
      w[j] -= kLr * m[j];
    }
    auto* mine = send_shard.data_as<BFloat16>();
    for (int64_t j = 0; j < shard; ++j) mine[j] = FloatToBF16(w[j]);
    ZS_RETURN_IF_ERROR(comm.Barrier());
    auto t2 = Clock::now();
    ZS_RETURN_IF_ERROR(comm.AllGather(mine, p, shard, DType::kBF16));
    auto t3_end_of_gather = Clock::now();
    ZS_RETURN_IF_ERROR(comm.Barrier());
    auto t3 = Clock::now();
    ZS_RETURN_IF_ERROR(comm.AllReduce(g, ar, padded, DType::kBF16, ReduceOp::kAvg));
    auto t4 = Clock::now();
    report.reduce_scatter_s += std::chrono::duration<double>(t1 - t0).count();
    report.all_gather_s += std::chrono::duration<double>(t3_end_of_gather - t2).count();
    report.all_reduce_s += std::chrono::duration<double>(t4 - t3).count();

    // Verify: the unsharded reference update, with the contract's rank-ordered f32 sum.
    for (int64_t i = 0; i < args.params; ++i) {
      float sum = BF16ToFloat(FloatToBF16(Gradient(0, i, step)));
      for (int k = 1; k < n; ++k) sum += BF16ToFloat(FloatToBF16(Gradient(k, i, step)));
      const BFloat16 avg = FloatToBF16(sum / float(n));
      ref_m[i] = kMomentum * ref_m[i] + BF16ToFloat(avg);
      ref_w[i] -= kLr * ref_m[i];
      const bool ok = p[i].bits == FloatToBF16(ref_w[i]).bits && ar[i].bits == avg.bits;
      if (!ok && report.mismatches++ == 0) {
        report.first_mismatch = fmt::format(
            "step {} element {}: gathered param {} vs reference {}, all-reduce {} vs {}", step, i,
            BF16ToFloat(p[i]), ref_w[i], BF16ToFloat(ar[i]), BF16ToFloat(avg));
      }
    }
  }
  check.Reset();
  report.memory = tracker.Snapshot();
  return OkStatus();
}

void PrintReport(int rank, int n, const DemoArgs& args, const RankReport& r) {
  const double bytes = double((args.params + n - 1) / n * n) * 2;  // the full bf16 buffer
  const double steps = args.steps;
  const double rs_bus = bytes * (n - 1) / n / (r.reduce_scatter_s / steps) / 1e9;
  const double ag_bus = bytes * (n - 1) / n / (r.all_gather_s / steps) / 1e9;
  const double ar_bus = 2 * bytes * (n - 1) / n / (r.all_reduce_s / steps) / 1e9;
  const int64_t psi = args.params;
  fmt::print("[rank {}] {} steps verified: {}\n", rank, args.steps,
             r.mismatches == 0 ? "every element matches the unsharded reference"
                               : fmt::format("{} MISMATCHES, first: {}", r.mismatches,
                                             r.first_mismatch));
  fmt::print("[rank {}] reduce_scatter {:.1f} ms ({:.2f} GB/s bus), all_gather {:.1f} ms "
             "({:.2f} GB/s), all_reduce {:.1f} ms ({:.2f} GB/s), per step\n",
             rank, 1e3 * r.reduce_scatter_s / steps, rs_bus, 1e3 * r.all_gather_s / steps,
             ag_bus, 1e3 * r.all_reduce_s / steps, ar_bus);
  if (rank == 0) {
    fmt::print("[rank 0] peak memory by tier and category:\n{}", r.memory.ToTable());
    // Unsharded (plain data parallel) the same state is bf16 params + bf16 grads + fp32 master
    // + fp32 momentum on every rank: 12 bytes per parameter.
    const int64_t unsharded = psi * 12;
    const int64_t measured = r.memory.TierPeak(MemoryTier::kDevice);
    fmt::print("[rank 0] device-tier peak {} per rank vs {} unsharded (x{:.2f} smaller): "
               "optimizer states {} instead of {}\n",
               FormatBytes(measured), FormatBytes(unsharded),
               double(unsharded) / double(measured),
               FormatBytes(r.memory.Peak(MemoryTier::kDevice, MemoryCategory::kOptimizerStates)),
               FormatBytes(psi * 8));
  }
}

int ParseArgs(int argc, char** argv, DemoArgs& args) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if ((a == "--world" || a == "--params" || a == "--steps") && (v = next()) == nullptr) {
      fmt::print(stderr, "zs_demo: {} needs a value\n", a);
      return 2;
    }
    if (a == "--world") {
      args.world = std::atoi(v);
    } else if (a == "--params") {
      args.params = std::atoll(v);
    } else if (a == "--steps") {
      args.steps = std::atoi(v);
    } else {
      fmt::print(stderr, "usage: zs_demo [--world N] [--params P] [--steps S]\n");
      return 2;
    }
  }
  if (args.world < 1 || args.params < 1 || args.steps < 1) {
    fmt::print(stderr, "zs_demo: --world, --params and --steps must be positive\n");
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace zs

int main(int argc, char** argv) {
  using namespace zs;
  TakeBackTerminationSignals("zs_demo");  // [Note: termination signals]
  DemoArgs args;
  if (int rc = ParseArgs(argc, argv, args); rc != 0) return rc;
  RegisterBuiltinBackends();

  auto launch = DetectLaunch();
  if (!launch.ok()) {
    fmt::print(stderr, "zs_demo: {}\n", launch.status().ToString());
    return 1;
  }
  if (launch->world_size > 1) {
    // One rank per process (zerorun, mpirun, srun): the fabric backend unless ZS_BACKEND says.
    MemoryTracker tracker(launch->rank);
    CommOptions options;
    options.tracker = &tracker;
    auto world = ConnectFromEnvironment("fabric", options);
    if (!world.ok()) {
      fmt::print(stderr, "zs_demo rank {}: {}\n", launch->rank, world.status().ToString());
      return 1;
    }
    Communicator& comm = **world;
    if (comm.rank() == 0) {
      fmt::print("zs_demo: {} ranks as processes over '{}', {} parameters, {} steps\n",
                 comm.size(), comm.backend_name(), args.params, args.steps);
    }
    RankReport report;
    Status s = RunRank(comm, args, report);
    if (!s.ok()) {
      fmt::print(stderr, "zs_demo rank {}: {}\n", comm.rank(), s.ToString());
      return 1;
    }
    PrintReport(comm.rank(), comm.size(), args, report);
    return report.mismatches == 0 ? 0 : 1;
  }

  // Ranks as threads of this process over the `local` backend.
  fmt::print("zs_demo: {} ranks as threads over 'local', {} parameters ({} per rank shard, "
             "padded), {} steps of reduce-scatter -> sharded SGD -> all-gather\n",
             args.world, args.params, (args.params + args.world - 1) / args.world, args.steps);
  auto backend = FindBackend("local");
  if (!backend.ok()) {
    fmt::print(stderr, "zs_demo: {}\n", backend.status().ToString());
    return 1;
  }
  InProcessStore store;
  std::vector<RankReport> reports(args.world);
  std::vector<Status> statuses(args.world);
  std::vector<std::unique_ptr<MemoryTracker>> trackers;
  for (int r = 0; r < args.world; ++r) trackers.push_back(std::make_unique<MemoryTracker>(r));
  std::vector<std::thread> threads;
  for (int r = 0; r < args.world; ++r) {
    threads.emplace_back([&, r] {
      CommOptions options;
      options.tracker = trackers[r].get();
      auto comm = (*backend)->Connect(store, r, args.world, options);
      statuses[r] = comm.ok() ? RunRank(**comm, args, reports[r]) : comm.status();
    });
  }
  for (auto& t : threads) t.join();
  int failed = 0;
  for (int r = 0; r < args.world; ++r) {
    if (!statuses[r].ok()) {
      fmt::print(stderr, "zs_demo rank {}: {}\n", r, statuses[r].ToString());
      ++failed;
      continue;
    }
    PrintReport(r, args.world, args, reports[r]);
    if (reports[r].mismatches != 0) ++failed;
  }
  fmt::print("zs_demo: {}\n", failed == 0 ? "all ranks verified" : "FAILED");
  return failed == 0 ? 0 : 1;
}
