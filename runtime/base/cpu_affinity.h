// CPU affinity of the calling process or thread: which CPUs it may run on, and binding the
// calling thread to one. zerorun binds each rank process to one CPU ([Note: rank binding] in
// tools/zerorun/launcher.h); a program that runs its ranks as threads binds each rank's thread
// the same way, so that both run as placed (bench_parallel's pipeline ranks).
//
// Contract
// - Plain functions over sched_getaffinity / sched_setaffinity on the calling thread; any
//   thread. Threads created by a thread after it was bound inherit its binding (Linux), so a
//   rank thread's communicator workers run on its CPU too.
// - Nothing blocks; errors name the CPU and errno.
#pragma once

#include <vector>

#include "runtime/base/status.h"

namespace zs {

// The CPUs the calling thread may run on, ascending; empty when they cannot be read.
std::vector<int> AllowedCpus();

// Binds the calling thread to `cpu` alone. InvalidArgument when `cpu` is outside cpu_set_t,
// Internal naming the CPU and errno when the kernel refuses (e.g. a CPU not in the cgroup).
Status BindThisThreadToCpu(int cpu);

}  // namespace zs
