// LaunchInfo: who this process is in the job (rank, world size, place on its host) and where
// the ranks meet, read from the variables the launcher left in the environment.
//
// Contract
// - DetectLaunch() reads the environment once and never blocks. The first family of variables
//   present decides the launcher:
//     zerorun  ZS_RANK, ZS_WORLD_SIZE, ZS_LOCAL_RANK, ZS_LOCAL_SIZE, ZS_RENDEZVOUS (ours; also
//              what a user sets by hand)
//     mpirun   OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE (Open MPI), else
//              PMI_RANK/PMI_SIZE with MPI_LOCALRANKID/MPI_LOCALNRANKS (MPICH, Intel MPI)
//     srun     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID + SLURM_TASKS_PER_NODE
//     single   none of these: rank 0 of 1
//   (Open MPI and PMI come before Slurm because mpirun inside an sbatch job also inherits the
//   batch step's SLURM_PROCID=0.)
// - Malformed or inconsistent values (not an integer, rank outside the world, a rank without
//   a world size) are InvalidArgument errors naming the variables and their values.
// - When the launcher does not say where a rank sits on its host, local_rank = rank and
//   local_size = world_size (as if every rank shared one host) and local_known = false.
// - The rendezvous is ZS_RENDEZVOUS for every launcher: a directory that all ranks reach (a
//   FileStore; one host, or many on a shared file system; use a fresh one per job, since keys
//   are write-once) or tcp://host:port (a TcpStore served by rank 0 on that port; host is
//   rank 0's host; no shared disk needed). A job of more than one rank without it is an error
//   that says what to set. A single rank needs none.
// - OpenStore connects this process to the rendezvous; for tcp:// rank 0 serves and must keep
//   the store alive while the other ranks use it. `timeout` bounds reaching the server.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "runtime/base/status.h"
#include "runtime/topology/store.h"

namespace zs {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  bool local_known = true;          // false: local_rank/local_size are the one-host guess
  std::string launcher = "single";  // "zerorun", "mpirun", "srun", "single"
  std::string rendezvous;           // a directory, "tcp://host:port", or "" (single rank)

  // "rank 2 of 4 (local 2 of 4, zerorun, rendezvous /tmp/zerorun-abc)"
  std::string ToString() const;
};

// Reads the process environment.
StatusOr<LaunchInfo> DetectLaunch();

// The same from any variable lookup (tests pass a map).
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
StatusOr<LaunchInfo> DetectLaunchFrom(const EnvLookup& env);

// The store of info.rendezvous: an InProcessStore for a single rank without a rendezvous, a
// FileStore for a directory (or "file://dir"), a TcpStore for "tcp://host:port".
StatusOr<std::unique_ptr<Store>> OpenStore(
    const LaunchInfo& info, std::chrono::milliseconds timeout = std::chrono::milliseconds(60'000));

}  // namespace zs
