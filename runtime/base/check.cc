#include "runtime/base/check.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace zs::internal {

void CheckFailed(const char* file, int line, const char* condition, const std::string& message) {
  // Ranks are often threads of one process: when several fail a check at once, the first one
  // reports and aborts, and the others wait for that. Two threads inside std::terminate or a
  // crash handler at the same time can deadlock ("terminate called recursively", then a hang).
  static std::atomic<bool> failing{false};
  if (failing.exchange(true)) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::fprintf(stderr, "zerostack: check failed at %s:%d: %s%s%s\n", file, line, condition,
               message.empty() ? "" : ": ", message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace zs::internal
