// Logging: one line per message to stderr, prefixed with the time, level and this process's
// rank tag ("[r2]"), so interleaved output of many ranks stays readable.
//
// Contract
// - ZS_LOG(kInfo, "fmt {}", args...) formats with fmt and writes one whole line atomically
//   (a single write call), from any thread.
// - The level threshold comes from ZS_LOG_LEVEL (debug, info, warn, error; default info).
// - SetLogRankTag sets the prefix for the whole process (ranks as threads may pass a tag per
//   message through ZS_LOG_RANK instead).
// - ScopedLogThreshold raises the threshold on the calling thread while it lives (scopes nest;
//   the higher of it and ZS_LOG_LEVEL applies): code that runs an engine only to count its
//   memory (runtime/plan) keeps the engine's run-time warnings out of what it prints.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace zs {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, int rank, std::string_view message);  // rank < 0: process tag
void SetLogRankTag(std::string tag);

class ScopedLogThreshold {
 public:
  explicit ScopedLogThreshold(LogLevel at_least);
  ~ScopedLogThreshold();
  ScopedLogThreshold(const ScopedLogThreshold&) = delete;
  ScopedLogThreshold& operator=(const ScopedLogThreshold&) = delete;

 private:
  LogLevel previous_;
};

}  // namespace zs

#define ZS_LOG(level, ...)                                                               \
  do {                                                                                   \
    if (::zs::LogEnabled(::zs::LogLevel::level))                                         \
      ::zs::LogLine(::zs::LogLevel::level, -1, fmt::format(__VA_ARGS__));                \
  } while (0)

#define ZS_LOG_RANK(level, rank, ...)                                                    \
  do {                                                                                   \
    if (::zs::LogEnabled(::zs::LogLevel::level))                                         \
      ::zs::LogLine(::zs::LogLevel::level, (rank), fmt::format(__VA_ARGS__));            \
  } while (0)
