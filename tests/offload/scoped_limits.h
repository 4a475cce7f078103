// Test helpers: a resource limit of this process lowered for one scope and restored after, so
// a failing assertion never leaves the next test with it. Header-only; tests of offload/ and the
// engine's offload tests use them.
#pragma once

#include <sys/resource.h>

#include <csignal>
#include <cstdint>

#include "runtime/base/check.h"

namespace zs::testing_support {

// RLIMIT_MEMLOCK's soft limit set to `bytes` (the pinned-memory checks read it).
class MemlockLimit {
 public:
  explicit MemlockLimit(int64_t bytes) {
    ZS_CHECK(getrlimit(RLIMIT_MEMLOCK, &saved_) == 0, "getrlimit(RLIMIT_MEMLOCK)");
    rlimit lowered = saved_;
    lowered.rlim_cur = static_cast<rlim_t>(bytes);
    ZS_CHECK(setrlimit(RLIMIT_MEMLOCK, &lowered) == 0, "setrlimit(RLIMIT_MEMLOCK, {})", bytes);
  }
  ~MemlockLimit() { ZS_CHECK(setrlimit(RLIMIT_MEMLOCK, &saved_) == 0, "restoring RLIMIT_MEMLOCK"); }
  MemlockLimit(const MemlockLimit&) = delete;
  MemlockLimit& operator=(const MemlockLimit&) = delete;

 private:
  rlimit saved_{};
};

// RLIMIT_FSIZE's soft limit set to `bytes` with SIGXFSZ ignored, so writing past it is EFBIG
// (a full disk, as the store sees it) rather than a kill.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(int64_t bytes) {
    ZS_CHECK(getrlimit(RLIMIT_FSIZE, &saved_) == 0, "getrlimit(RLIMIT_FSIZE)");
    saved_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = saved_;
    lowered.rlim_cur = static_cast<rlim_t>(bytes);
    ZS_CHECK(setrlimit(RLIMIT_FSIZE, &lowered) == 0, "setrlimit(RLIMIT_FSIZE, {})", bytes);
  }
  ~FileSizeLimit() {
    ZS_CHECK(setrlimit(RLIMIT_FSIZE, &saved_) == 0, "restoring RLIMIT_FSIZE");
    std::signal(SIGXFSZ, saved_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  sighandler_t saved_handler_{};
};

}  // namespace zs::testing_support
