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
// - The first rank to fail ends the job: zerorun prints which rank failed and how on err_fd
//   (LaunchResult::failed_rank), sends SIGTERM (then SIGCONT, so that a stopped rank acts on
//   it) to the process groups of the running ranks and, after `grace`, SIGKILL. A rank fails
//   by exiting non-zero or dying by a signal; the one named is chosen by [Note: blame]. A
//   `timeout` (0 = none) or a signal read from interrupt_fd (see InstallSignalForwarding; it is
//   forwarded to the ranks) ends the job the same way. When a rank exits, whatever it left
//   running in its process group is killed.
// - [Note: blame] One failure makes the others fail: a rank that dies makes its peers' next
//   operation fail, and they may exit within the same 50 ms poll, in any order. So the rank
//   named is, in this order of precedence: (1) one that died by a signal zerorun did not send
//   (a peer cannot kill it, but its death makes peers exit with an error code); (2) a rank that
//   is stopped (SIGSTOP, SIGTSTP, ...; seen with waitid(WSTOPPED)) while others fail: its peers'
//   operations time out waiting for it; (3) the first rank seen exiting with an error code,
//   but only after kBlameWindow (250 ms) in which no rank of kind (1) or (2) appeared: a killed
//   rank closes its sockets and files a moment before it becomes a zombie that waitid sees,
//   so a peer's error can be seen first. The others are stopped once the rank is named. A rank
//   that hangs without being stopped (a busy loop, a blocked system call) is not detected
//   here: its peers' errors name it (e.g. "waiting for rank(s) 2") in their relayed output.
// - Exit code of the job (LaunchResult::exit_code): 0 if every rank exited 0; else that of the
//   failing rank named (its code, 128+signal if it was killed, 128+stop signal if it was
//   stopped); 124 on timeout; 128+signal when interrupted.
// - [Note: dead launcher] Each rank gets PR_SET_PDEATHSIG(SIGKILL) (and exits at once if
//   zerorun died before that was set): if zerorun is killed (SIGKILL, an OOM kill), its ranks
//   are killed too, instead of running on unattended. Descendants of a rank that left its
//   process group are not. The signal follows the thread that called RunRanks: it must not exit
//   while the job runs (RunRanks blocks it, so only a caller that kills it could).
// - Job directory: <TMPDIR or /tmp>/zerorun-<zerorun's pid>-XXXXXX, created at start, holding
//   "ranks" (the pid of each rank, one a line, written right after its fork) and, when no
//   rendezvous is given, the rendezvous ("rendezvous/"). RunRanks first removes what dead
//   launchers left: for each zerorun-<pid>-* directory whose pid is dead (kill(pid, 0) fails
//   with ESRCH, or the process is a zombie), the <shm_dir>/<rank pid>:* entries of every rank
//   listed that is dead too, then the directory once all its ranks are. Only provably dead
//   owners: a live launcher's job, or a rank pid now used by a live process, is left alone.
//   (Pids are those of zerorun's pid namespace: hosts whose containers have their own pid
//   namespaces must not share one TMPDIR between them.)
// - Clean-up, always: the job directory (with the temporary rendezvous) and every
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
std::vector<int> RankCpus(CpuBinding bind, int rank, const std::vector<int>& allowed);

struct RankOutcome {
  int rank = 0;
  pid_t pid = -1;
  bool exited = false;  // exited normally with exit_code
  int exit_code = 0;
  int signal = 0;        // killed by this signal (when !exited)
  bool stopped = false;  // it was still running when the job was stopped
  int suspended_by = 0;  // it was stopped by this signal (SIGSTOP, ...) when the job was stopped
};

struct LaunchResult {
  int exit_code = 0;
  std::string failure;   // the message printed about the first failure, timeout or signal
  int failed_rank = -1;  // the rank named as the failure ([Note: blame]); -1: none
  std::vector<RankOutcome> ranks;
};

StatusOr<LaunchResult> RunRanks(const LaunchOptions& options);

// Installs SIGINT and SIGTERM handlers that write the signal number to a pipe and returns the
// pipe's read end, for LaunchOptions::interrupt_fd. Also ignores SIGPIPE (so a closed stdout
// does not kill zerorun and orphan the ranks; ranks get the default back). For main() only.
StatusOr<int> InstallSignalForwarding();

}  // namespace zs
