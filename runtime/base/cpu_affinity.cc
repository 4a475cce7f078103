#include "runtime/base/cpu_affinity.h"

#include <sched.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace zs {

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

Status BindThisThreadToCpu(int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) {
    return InvalidArgumentError(
        fmt::format("cannot bind to CPU {}: outside 0..{}", cpu, CPU_SETSIZE - 1));
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (::sched_setaffinity(0, sizeof(set), &set) != 0) {
    const int err = errno;
    return InternalError(fmt::format("binding this thread to CPU {} failed: {} (errno {})", cpu,
                                     std::strerror(err), err));
  }
  return OkStatus();
}

}  // namespace zs
