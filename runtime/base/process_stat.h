// ProcessStat: what /proc/<pid>/stat says of a process of this host (its state letter and its
// start time), and ProcessGone, the one answer to "has this process ended?" that the fabric
// backend (a peer of the same host, runtime/comm/fabric/fabric_peer.h) and zerorun (a dead
// launcher's ranks, tools/zerorun/launcher.h) both need.
//
// Contract
// - Plain functions over the OS process table; no state; callable from any thread. Each costs
//   at most one kill(pid, 0) and one small /proc read (several microseconds): poll them every
//   few hundred ms, not in a tight loop.
// - ReadProcessStat is NotFound (naming the path) when /proc/<pid>/stat cannot be read (no
//   such process, or /proc not mounted), Internal (naming the path and the line) when the line
//   does not parse. ParseProcessStat is its pure half: one line of that file.
// - [Note: process gone] ProcessGone(pid, start_time) is true only when the process provably
//   ended: kill(pid, 0) fails with ESRCH; or /proc says it is a zombie ('Z') or dead ('X'),
//   killed but not yet reaped (its files and mappings are gone already, and its pid cannot be
//   reused until it is reaped); or `start_time` was
//   recorded (non-zero) and the process now holding `pid` started at another time (the pid was
//   reused). A live process of another user (EPERM) is alive unless one of these holds; so is
//   any process whose /proc entry cannot be read (cannot tell: assume alive), and pid <= 0.
//   Pids are those of the caller's pid namespace.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string_view>

#include "runtime/base/status.h"

namespace zs {

struct ProcessStat {
  char state = '?';         // field 3: 'R', 'S', 'D', 'T', 't', 'Z', 'X', ...
  uint64_t start_time = 0;  // field 22: clock ticks after boot at which the process started
};

StatusOr<ProcessStat> ReadProcessStat(pid_t pid);
// The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
StatusOr<ProcessStat> ParseProcessStat(std::string_view line);

// See [Note: process gone]; start_time 0 means "not recorded" (no pid-reuse check).
bool ProcessGone(pid_t pid, uint64_t start_time = 0);

}  // namespace zs
