// grid_parity_worker: one rank of a GridGpt parity run with ranks as processes, started by
// zerorun (or any launcher that sets ZS_RENDEZVOUS). Every process first runs the one-rank
// reference itself (grid_parity.h: the same global batch and seed on one rank of the local
// backend, a few milliseconds for this model), then joins the world through
// ConnectFromEnvironment, builds the tp x pp x dp ProcessGroups, trains GridGpt for
// parity::kSteps steps and compares every step's loss and gradient norm and every final
// parameter it holds (gathered over dp) with the reference (parity::ParityFailures, the
// tolerances of [Note: parameter tolerance]). The parameter differences are gathered over the
// world, so every rank judges the whole grid.
//
//   zerorun -n 8 --backend fabric -- grid_parity_worker --tp 2 --pp 2 [OPTIONS]
//
// OPTIONS (dp is the world size / (tp * pp)):
//   --tp N, --pp N, --layers N, --ga N (micro-batches per step per dp rank), --stage N,
//   --schedule gpipe|1f1b|interleaved, --virtual-stages N, --sequence-parallel, --recompute,
//   --experts N, --ep N
//   --lr-scale F   a deliberate mistake: the grid trains at F times the reference's learning
//                  rate (for the check that the comparison can fail)
//
// Output: rank 0 prints one line with the measured differences; every rank that finds a
// mismatch prints "grid_parity_worker: rank R: MISMATCH: ..." per failed check (the step or
// the parameter, both values, the tolerance).
// Exit code: 0 when the grid matches the reference, 1 on a mismatch or an error, 2 on bad
// arguments, 77 (ctest's "skipped") when the backend cannot run on this machine.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/comm/all_gather_scalar.h"
#include "runtime/comm/backend_registry.h"
#include "runtime/comm/connect.h"
#include "runtime/device/device_factory.h"
#include "runtime/topology/launch_info.h"
#include "tests/runtime/parallel/gpt/grid_parity.h"

namespace zs::parallel::parity {
namespace {

constexpr std::string_view kName = "grid_parity_worker";

// --flag VALUE pairs and plain --flags into `spec`; an error names the argument.
Status ParseArgs(int argc, char** argv, GridSpec& spec) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--sequence-parallel") {
      spec.sequence_parallel = true;
      continue;
    }
    if (arg == "--recompute") {
      spec.recompute = true;
      continue;
    }
    if (i + 1 >= argc) return InvalidArgumentError(fmt::format("'{}' needs a value", arg));
    const std::string_view value = argv[++i];
    auto integer = [&](int& out, int min) -> Status {
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
      if (ec != std::errc() || end != value.data() + value.size() || out < min) {
        return InvalidArgumentError(
            fmt::format("{} '{}' is not an integer >= {}", arg, value, min));
      }
      return OkStatus();
    };
    if (arg == "--tp") {
      ZS_RETURN_IF_ERROR(integer(spec.tp, 1));
    } else if (arg == "--pp") {
      ZS_RETURN_IF_ERROR(integer(spec.pp, 1));
    } else if (arg == "--layers") {
      ZS_RETURN_IF_ERROR(integer(spec.layers, 1));
    } else if (arg == "--ga") {
      ZS_RETURN_IF_ERROR(integer(spec.ga, 1));
    } else if (arg == "--stage") {
      ZS_RETURN_IF_ERROR(integer(spec.stage, 0));
    } else if (arg == "--virtual-stages") {
      ZS_RETURN_IF_ERROR(integer(spec.virtual_stages, 1));
    } else if (arg == "--experts") {
      ZS_RETURN_IF_ERROR(integer(spec.experts, 0));
    } else if (arg == "--ep") {
      ZS_RETURN_IF_ERROR(integer(spec.ep, 1));
    } else if (arg == "--schedule") {
      ZS_ASSIGN_OR_RETURN(spec.schedule, ParseScheduleKind(value));
    } else if (arg == "--lr-scale") {
      char* end = nullptr;
      const std::string text(value);
      spec.lr_scale = std::strtod(text.c_str(), &end);
      if (end != text.c_str() + text.size() || !(spec.lr_scale > 0)) {
        return InvalidArgumentError(fmt::format("--lr-scale '{}' is not a positive number", value));
      }
    } else {
      return InvalidArgumentError(fmt::format("unknown argument '{}'", arg));
    }
  }
  return OkStatus();
}

// This rank's part: connect, train, compare. Returns the failed checks (empty: the grid
// matches); an error when the run itself failed.
StatusOr<std::vector<std::string>> RunRank(GridSpec spec, const LaunchInfo& launch) {
  if (launch.world_size % (spec.tp * spec.pp) != 0) {
    return InvalidArgumentError(
        fmt::format("the world of {} ranks is not a multiple of tp {} x pp {}", launch.world_size,
                    spec.tp, spec.pp));
  }
  spec.dp = launch.world_size / (spec.tp * spec.pp);
  // Before connecting: no peer busy-waits on this rank while it computes.
  ZS_ASSIGN_OR_RETURN(const Reference ref, RunReference(spec));

  MemoryTracker tracker(launch.rank);
  CommOptions options;
  options.tracker = &tracker;
  // One operation waits at most a minute (eight busy-polling processes on two cores take well
  // under a second for the whole run); ZS_COMM_TIMEOUT_MS overrides it.
  options.timeout = std::chrono::milliseconds(60'000);
  ZS_ASSIGN_OR_RETURN(auto world, ConnectFromEnvironment("fabric", options));
  const int rank = world->rank();
  ZS_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(spec.tp, spec.pp, spec.dp, world->size()));
  ZS_ASSIGN_OR_RETURN(ProcessGroups groups, ProcessGroups::Create(*world, grid));
  ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
  ZS_ASSIGN_OR_RETURN(RankResult mine, RunGridRank(spec, groups, *device, tracker, &ref));

  // The whole grid's parameter differences, the same on every rank (summed in rank order).
  ZS_ASSIGN_OR_RETURN(std::vector<double> maxima, AllGatherScalar(*world, mine.diff.max));
  ZS_ASSIGN_OR_RETURN(double sum, AllSumScalar(*world, mine.diff.sum));
  ZS_ASSIGN_OR_RETURN(double count, AllSumScalar(*world, double(mine.diff.count)));
  const int worst_rank = int(std::max_element(maxima.begin(), maxima.end()) - maxima.begin());
  ParamDiff all;
  all.max = maxima[size_t(worst_rank)];
  all.sum = sum;
  all.count = int64_t(count);
  all.worst = worst_rank == rank
                  ? mine.diff.worst
                  : fmt::format("an element of rank {} (see its report)", worst_rank);
  std::vector<std::string> failures = ParityFailures(mine.losses, mine.grad_norms, all, ref);
  if (rank == 0 && !mine.losses.empty() && mine.losses.size() == ref.losses.size()) {
    double worst_loss = 0;
    for (size_t s = 0; s < ref.losses.size(); ++s) {
      worst_loss =
          std::max(worst_loss, std::abs(mine.losses[s] - ref.losses[s]) / std::abs(ref.losses[s]));
    }
    std::printf(
        "%s: %s, %d processes over %s: losses %.6f -> %.6f (one rank %.6f -> %.6f), "
        "worst step %.3g relative (tolerance %g); parameters: max |diff| %.3g "
        "(tolerance %g, at %s), mean %.3g (tolerance %g) over %lld values\n",
        kName.data(), spec.ToString().c_str(), world->size(),
        std::string(world->backend_name()).c_str(), mine.losses.front(), mine.losses.back(),
        ref.losses.front(), ref.losses.back(), worst_loss, kLossTolerance, all.max, kParamTolerance,
        all.worst.c_str(), all.mean(), kMeanTolerance, static_cast<long long>(all.count));
  }
  for (const std::string& failure : failures) {
    std::printf("%s: rank %d: MISMATCH: %s\n", kName.data(), rank, failure.c_str());
  }
  std::fflush(stdout);
  // No rank leaves while a peer may still be talking to it (or printing its report: zerorun
  // stops the other ranks when the first one exits non-zero).
  ZS_RETURN_IF_ERROR(world->Barrier());
  return failures;
}

int Main(int argc, char** argv) {
  GridSpec spec;
  if (Status parsed = ParseArgs(argc, argv, spec); !parsed.ok()) {
    std::fprintf(stderr, "%s: %s\n", kName.data(), parsed.ToString().c_str());
    return 2;
  }
  const char* from_env = std::getenv("ZS_BACKEND");
  const std::string backend = from_env && *from_env ? from_env : "fabric";
  RegisterBuiltinBackends();
  auto found = FindBackend(backend);
  if (!found.ok()) {
    std::fprintf(stderr, "%s: %s\n", kName.data(), found.status().ToString().c_str());
    return 1;
  }
  if (Status available = (*found)->Available(); !available.ok()) {
    std::fprintf(stderr, "%s: skipped, backend '%s' cannot run here: %s\n", kName.data(),
                 backend.c_str(), available.ToString().c_str());
    return 77;
  }
  auto launch = DetectLaunch();
  if (!launch.ok()) {
    std::fprintf(stderr, "%s: %s\n", kName.data(), launch.status().ToString().c_str());
    return 1;
  }
  StatusOr<std::vector<std::string>> failures = RunRank(spec, *launch);
  if (!failures.ok()) {
    std::fprintf(stderr, "%s: rank %d: %s\n", kName.data(), launch->rank,
                 failures.status().ToString().c_str());
    return 1;
  }
  return failures->empty() ? 0 : 1;
}

}  // namespace
}  // namespace zs::parallel::parity

int main(int argc, char** argv) { return zs::parallel::parity::Main(argc, argv); }
