// TakeBackTerminationSignals: a program that links libfabric ends on Ctrl-C and SIGTERM as its
// own program would, whatever handlers libfabric's providers installed before main.
//
// [Note: termination signals] libfabric links libpsm_infinipath, whose libinfinipath.so.4
// installs handlers for SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGILL and SIGABRT in its ELF
// constructor, before main, unless IPATH_NO_BACKTRACE is set in the environment the program
// starts with (a setenv in main comes too late for it). Its handler writes a backtrace and calls
// exit(1) from the signal handler: the run ends with code 1, and static destructors and atexit
// handlers run while rank threads and communicator workers still do, which can crash (issue 27
// saw a SIGSEGV that same handler reported). So SIGINT and SIGTERM are taken back (unless
// ignored) by a handler that only writes "<program>: interrupted by SIG..." (write(2),
// async-signal-safe), restores the default action and re-raises: the process ends at once with
// 128+signal, running no destructors. libfabric's shm provider, which installs its own
// SIGINT/SIGTERM handler later (at an endpoint's creation) to unlink its /dev/shm files, chains
// to this one. HFI_NO_BACKTRACE and IPATH_NO_BACKTRACE are set (for libraries loaded later, e.g.
// by the psm2 provider's probe) unless the caller set one; then the fatal-signal handlers that
// live in libinfinipath/libpsm stay as the caller configured them, else they are reset to the
// default (a crash is a crash, with a core dump, and no "*.btr" files in the working directory).
//
// Contract
// - Call once, first thing in main, while one thread runs (it calls setenv and sigaction).
// - `program` names the program in the message; its first 63 bytes are kept.
#pragma once

#include <string_view>

namespace zs {

void TakeBackTerminationSignals(std::string_view program);

}  // namespace zs
