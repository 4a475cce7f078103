// comm_check_worker: one rank of a multi-process conformance run, started by zerorun (or
// mpirun/srun with ZS_RENDEZVOUS set). It joins the job through ConnectFromEnvironment, runs
// every backend-generic check (comm_checks.h) and reports.
//
//   zerorun -n 3 --backend fabric comm_check_worker [BACKEND [CHECKS]]
//
// CHECKS: "all" (default: every check of RunAllCommChecks, then CheckLateReceives) or "late"
// (CheckLateReceives only: a short run for a short ZS_COMM_TIMEOUT_MS).
//
// Exit code: 0 when every check passed on this rank, 1 on a failure, 77 (ctest's "skipped")
// when the backend cannot run on this machine.
#include <cstdio>
#include <string>

#include "runtime/comm/backend_registry.h"
#include "runtime/comm/connect.h"
#include "tests/runtime/comm/comm_checks.h"

int main(int argc, char** argv) {
  const std::string requested = argc > 1 ? argv[1] : "fabric";
  const std::string which = argc > 2 ? argv[2] : "all";
  if (which != "all" && which != "late") {
    std::fprintf(stderr, "comm_check_worker: unknown checks '%s' (all, late)\n", which.c_str());
    return 1;
  }
  const char* from_env = std::getenv("ZS_BACKEND");
  const std::string backend = from_env && *from_env ? from_env : requested;
  zs::RegisterBuiltinBackends();
  auto found = zs::FindBackend(backend);
  if (!found.ok()) {
    std::fprintf(stderr, "comm_check_worker: %s\n", found.status().ToString().c_str());
    return 1;
  }
  if (zs::Status available = (*found)->Available(); !available.ok()) {
    std::fprintf(stderr, "comm_check_worker: skipped, backend '%s' cannot run here: %s\n",
                 backend.c_str(), available.ToString().c_str());
    return 77;
  }
  auto comm = zs::ConnectFromEnvironment(requested);
  if (!comm.ok()) {
    std::fprintf(stderr, "comm_check_worker: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  zs::Status checks = which == "all" ? zs::testing::RunAllCommChecks(**comm) : zs::OkStatus();
  // nccl's sends are stream-ordered: late receives deadlock there by design (comm_checks.h).
  if (checks.ok() && (*comm)->backend_name() != "nccl") {
    checks = zs::testing::CheckLateReceives(**comm);
  }
  if (checks.ok()) {
    // No rank leaves while a peer may still be talking to it.
    checks = (*comm)->Barrier();
  }
  std::printf("comm_check_worker: rank %d of %d (%s): %s\n", (*comm)->rank(), (*comm)->size(),
              std::string((*comm)->backend_name()).c_str(), checks.ToString().c_str());
  std::fflush(stdout);
  return checks.ok() ? 0 : 1;
}
