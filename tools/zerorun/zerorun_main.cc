// zerorun: starts N ranks of a program on this host (see launcher.h for what it guarantees).
//
//   zerorun -n 4 [--backend fabric|local|nccl] [--timeout SECONDS] [--grace SECONDS]
//           [--rendezvous DIR|tcp://HOST:PORT] [--tag-output | --output-dir DIR]
//           [--bind core|none]
//           [--] PROGRAM ARGS...
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "tools/zerorun/launcher.h"

int main(int argc, char** argv) {
  CLI::App app{
      "zerorun: starts N ranks of PROGRAM on this host, each with ZS_RANK, ZS_WORLD_SIZE, "
      "ZS_LOCAL_RANK, ZS_LOCAL_SIZE, ZS_RENDEZVOUS (and ZS_BACKEND) in its environment.\n"
      "Output lines are prefixed with [r<rank>]. When a rank fails, the others are stopped and "
      "zerorun exits with its code (128+signal if it was killed, 124 on --timeout); the rank "
      "named is one that died by a signal or was stopped, before peers that exited with an "
      "error. Ranks die with zerorun; the next zerorun removes what a killed one left "
      "(its $TMPDIR/zerorun-<pid>-* directory, its ranks' /dev/shm/<pid>:* files)."};
  app.set_help_flag("-h,--help", "print this help");
  zs::LaunchOptions options;
  double timeout_s = 0, grace_s = 5;
  app.add_option("-n,--np", options.num_ranks, "number of ranks")
      ->required()
      ->check(CLI::Range(1, 4096));
  app.add_option("--backend", options.backend, "communication backend for the ranks (ZS_BACKEND)")
      ->check(CLI::IsMember({"fabric", "local", "nccl"}));
  app.add_option("--timeout", timeout_s, "stop every rank after this many seconds (0: never)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--grace", grace_s, "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rendezvous", options.rendezvous,
                 "rendezvous: a directory, or tcp://HOST:PORT served by rank 0 (default: a "
                 "fresh temporary directory, removed at the end)");
  std::string bind = "core";
  app.add_option("--bind", bind,
                 "core (default): bind local rank r to the r-th CPU zerorun may use, modulo "
                 "their count; none: leave the ranks to the scheduler")
      ->check(CLI::IsMember({"core", "none"}));
  bool tag_output = false;
  auto* tag =
      app.add_flag("--tag-output", tag_output, "prefix each output line with [r<rank>] (default)");
  auto* dir = app.add_option("--output-dir", options.output_dir,
                             "write rank k's output to DIR/rank<k>.stdout and .stderr");
  tag->excludes(dir);
  app.footer("Everything after the first positional argument (or after --) is PROGRAM ARGS.");
  app.prefix_command();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints the help or the error
    return code == 0 ? 0 : 2;
  }
  options.command = app.remaining();
  if (!options.command.empty() && options.command.front() == "--") {
    options.command.erase(options.command.begin());
  }
  if (options.command.empty()) {
    std::fprintf(stderr, "zerorun: no PROGRAM given\n%s", app.help().c_str());
    return 2;
  }
  options.bind = bind == "none" ? zs::CpuBinding::kNone : zs::CpuBinding::kCore;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  options.grace = std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));

  auto interrupt = zs::InstallSignalForwarding();
  if (!interrupt.ok()) {
    std::fprintf(stderr, "zerorun: %s\n", interrupt.status().message().c_str());
    return 1;
  }
  options.interrupt_fd = *interrupt;
  auto result = zs::RunRanks(options);
  if (!result.ok()) {
    std::fprintf(stderr, "zerorun: %s\n", result.status().message().c_str());
    return result.status().code() == zs::StatusCode::kNotFound ? 127 : 1;
  }
  return result->exit_code;
}
