// ZS_CHECK: invariants whose failure is a bug in zerostack or in its caller's use of an API.
//
// Contract
// - ZS_CHECK(cond) and ZS_CHECK(cond, "fmt {}", args...) print the file, line, condition and
//   message to stderr and terminate the process. They stay on in release builds.
// - Never use them for I/O, network, device or user-input errors: return a Status instead.
// - ZS_DCHECK is compiled only when NDEBUG is not defined (debug and sanitizer builds).
#pragma once

#include <fmt/format.h>

#include <string>

namespace zs::internal {

[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              const std::string& message);

inline std::string CheckMessage() { return {}; }
template <typename... Args>
std::string CheckMessage(fmt::format_string<Args...> format, Args&&... args) {
  return fmt::format(format, std::forward<Args>(args)...);
}

}  // namespace zs::internal

#define ZS_CHECK(cond, ...)                                                             \
  do {                                                                                  \
    if (!(cond)) [[unlikely]] {                                                         \
      ::zs::internal::CheckFailed(__FILE__, __LINE__, #cond,                            \
                                  ::zs::internal::CheckMessage(__VA_ARGS__));           \
    }                                                                                   \
  } while (0)

#ifdef NDEBUG
#define ZS_DCHECK(cond, ...) \
  do {                       \
  } while (0)
#else
#define ZS_DCHECK(cond, ...) ZS_CHECK(cond, ##__VA_ARGS__)
#endif
