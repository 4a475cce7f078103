// Launcher: the library behind the `zerorun` tool. It starts N ranks of one program on this
// host as child processes, gives each its identity through the environment, relays their
// output, and makes the job end as a whole: when one rank fails, the others are stopped.
//
// Contract
// - RunRanks blocks the calling thread until every rank has exited and been reaped. It forks
//   (the caller should have no other threads that hold locks the child might need: the child
//   only calls async-signal-safe functions before exec).
// - Each rank runs in its own process group with ZS_RANK, ZS_WORLD_SIZE, ZS_LOCAL_RANK,
//   ZS_LOCAL_SIZE, ZS_RENDEZVOUS and (if backend is set) ZS_BACKEND in its environment. Rank
//   0 keeps the caller's stdin; the others read /dev/null.
// - Output: by default every line a rank writes to stdout (stderr) is written to out_fd
//   (err_fd) as "[r<k>] <line>" in one write call, so lines of different ranks never mix;
//   with output_dir, rank k writes straight to <output_dir>/rank<k>.stdout and .stderr.
// - The first rank to exit non-zero or die by a signal ends the job: zerorun prints which rank
//   failed and how on err_fd, sends SIGTERM to the process groups of the running ranks and,
//   after `grace`, SIGKILL. A `timeout` (0 = none) or a signal read from interrupt_fd (see
//   InstallSignalForwarding; it is forwarded to the ranks) ends the job the same way. When a
//   rank exits, whatever it left running in its process group is killed.
// - Exit code of the job (LaunchResult::exit_code): 0 if every rank exited 0; else that of the
//   first failing rank (its code, or 128+signal); 124 on timeout; 128+signal when interrupted.
// - Clean-up, always: the temporary rendezvous directory (when zerorun created it) and every
//   <shm_dir>/<pid>:* entry of every rank's pid. [Note: shm leftovers] libfabric's shm
//   provider creates a 16 MiB /dev/shm/<pid>:<name> file per endpoint and removes it only in
//   fi_close(): a rank that is killed or crashes leaves it behind, and the tmpfs fills up over
//   many runs. They are removed when the rank has exited but before it is reaped (waitid
//   with WNOWAIT): while its zombie exists the pid cannot be reused, so every <pid>:* name
//   is this rank's.
// - [Note: rank binding] By default (CpuBinding::kCore) each rank is bound to one CPU of those
//   zerorun may use (sched_getaffinity): local rank r to the r-th, modulo their count. Why:
//   unbound, the scheduler often put two busy-polling ranks on one CPU while the other ran
//   something else; on 2 vCPUs, 2 and 4 ranks of bench_comm over fabric ran 2-3x slower
//   unbound (issue 25, docs/PERFORMANCE.md). mpirun binds to cores alike (up to as many ranks
//   as cores). kNone leaves placement to the scheduler (several jobs sharing a host).
// - Errors that prevent the job from starting (bad options, a program that cannot be executed,
//   no temporary directory) are returned as a Status naming the value; ranks already started
//   are then killed and reaped first.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace zs {

// Where the ranks may run ([Note: rank binding]).
enum class CpuBinding {
  kCore,  // local rank r runs on the r-th CPU zerorun may use (modulo their count)
  kNone,  // on every CPU zerorun may use, as the scheduler places them
};

struct LaunchOptions {
  int num_ranks = 1;
  std::vector<std::string> command;        // the program (found on PATH) and its arguments
  std::string backend;                     // ZS_BACKEND for the ranks; empty: not set
  std::chrono::milliseconds timeout{0};    // 0: no limit
  std::chrono::milliseconds grace{5'000};  // between SIGTERM and SIGKILL
  std::string rendezvous;  // a directory (created, kept) or tcp://host:port; empty: a fresh
                           // temporary directory, removed at the end
  std::string output_dir;  // empty: tagged lines on out_fd / err_fd
  int out_fd = STDOUT_FILENO;
  int err_fd = STDERR_FILENO;        // also receives zerorun's own messages
  std::string shm_dir = "/dev/shm";  // where libfabric's shm leftovers are removed from
  int interrupt_fd = -1;             // readable: a byte holding a signal number to forward
  CpuBinding bind = CpuBinding::kCore;
};

// The CPUs rank `rank` may run on, given the CPUs zerorun may use (`allowed`, ascending): one
// under kCore, all under kNone.
std::vector<int> RankCpus(CpuBinding bind, int rank,
                          const std::vector<int>& allowed);

struct RankOutcome {
  int rank = 0;
  pid_t pid = -1;
  bool exited = false;  // exited normally with exit_code
  int exit_code = 0;
  int signal = 0;        // killed by this signal (when !exited)
  bool stopped = false;  // it was still running when the job was stopped
};

struct LaunchResult {
  int exit_code = 0;
  std::string failure;  // the message printed about the first failure, timeout or signal
  std::vector<RankOutcome> ranks;
};

StatusOr<LaunchResult> RunRanks(const LaunchOptions& options);

// Installs SIGINT and SIGTERM handlers that write the signal number to a pipe and returns the
// pipe's read end, for LaunchOptions::interrupt_fd. Also ignores SIGPIPE (so a closed stdout
// does not kill zerorun and orphan the ranks; ranks get the default back). For main() only.
StatusOr<int> InstallSignalForwarding();

}  // namespace zs
