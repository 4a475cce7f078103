#include "runtime/base/log.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>

namespace zs {
namespace {

LogLevel ThresholdFromEnv() {
  const char* v = std::getenv("ZS_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kInfo;
  std::string s(v);
  if (s == "debug") return LogLevel::kDebug;
  if (s == "warn") return LogLevel::kWarn;
  if (s == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

// ScopedLogThreshold's, per thread.
thread_local LogLevel thread_threshold = LogLevel::kDebug;

std::mutex& TagMutex() {
  static std::mutex m;
  return m;
}
std::string& Tag() {
  static std::string tag;
  return tag;
}

}  // namespace

bool LogEnabled(LogLevel level) {
  static const LogLevel threshold = ThresholdFromEnv();
  return level >= threshold && level >= thread_threshold;
}

ScopedLogThreshold::ScopedLogThreshold(LogLevel at_least) : previous_(thread_threshold) {
  thread_threshold = std::max(previous_, at_least);
}

ScopedLogThreshold::~ScopedLogThreshold() { thread_threshold = previous_; }

void SetLogRankTag(std::string tag) {
  std::lock_guard<std::mutex> lock(TagMutex());
  Tag() = std::move(tag);
}

void LogLine(LogLevel level, int rank, std::string_view message) {
  static constexpr const char* kNames[] = {"D", "I", "W", "E"};
  using Clock = std::chrono::steady_clock;
  static const Clock::time_point start = Clock::now();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::string tag;
  if (rank >= 0) {
    tag = fmt::format("[r{}]", rank);
  } else {
    std::lock_guard<std::mutex> lock(TagMutex());
    tag = Tag();
  }
  std::string line = fmt::format("{} {:9.3f} {}{}{}\n", kNames[int(level)], seconds, tag,
                                 tag.empty() ? "" : " ", message);
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace zs
