#include "runtime/base/check.h"

#include <cstdio>
#include <exception>

namespace zs::internal {

void CheckFailed(const char* file, int line, const char* condition, const std::string& message) {
  std::fprintf(stderr, "zerostack: check failed at %s:%d: %s%s%s\n", file, line, condition,
               message.empty() ? "" : ": ", message.c_str());
  std::fflush(stderr);
  std::terminate();
}

}  // namespace zs::internal
